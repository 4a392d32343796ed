SELECT {p}release_v1($1, $2)
