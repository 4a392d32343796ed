SELECT {s}.{p}leave_v2($1, $2)
