SELECT granted_token, queue_ticket, retry_ms, run
  FROM {s}.{p}acquire_v4($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
