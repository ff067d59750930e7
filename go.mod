module github.com/rewindstack/rewind

go 1.26.8
