package symbolize

import _ "github.com/ianlancetaylor/demangle" // C++ and Rust names
