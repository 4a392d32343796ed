SELECT {s}.{p}release_v3($1, $2, $3, $4, $5, $6)
