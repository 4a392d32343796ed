-- The live holders: {owner, record, owner, record, ...}. Reads only.
return live_holders(clock())
