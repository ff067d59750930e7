// Package clitest holds tests of the rewind command (dumps of live
// processes and cores, reports, recordings checked against perf and
// against each other, SFrame generation) that run the built command
// only, apart from package main's tests so that each package stays well
// within go test's timeout on a loaded machine and the two run side by
// side. It has no code of its own.
package clitest
