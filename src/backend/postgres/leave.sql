SELECT {p}leave_v1($1, $2)
