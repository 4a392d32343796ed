SELECT {p}release_v2($1, $2)
