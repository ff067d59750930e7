module gostack

go 1.26
