# Shell helpers shared by the lab's scripts; source it from the repository root.

# num KEY: the number that follows "KEY " in each line of standard input.
num() { sed -E "s/.*$1 ([0-9.e+]+).*/\\1/"; }
