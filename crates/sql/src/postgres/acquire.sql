SELECT granted_token, queue_ticket, retry_ms, run, group_record
  FROM {s}.{p}acquire_v5($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
