SELECT granted_token, queue_ticket, retry_ms
  FROM {p}acquire_v3($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
