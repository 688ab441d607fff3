-- A stale day settles before it is summarised again (issue 42).
--
-- A closed day written again (a late or re-sent batch, a re-attribution) is marked stale
-- (`evidence_day_stale`, migration 0029) and the background step summarised it again at its next
-- round. A back-fill of a large fleet's month in chunks writes every day of the month again with
-- each chunk, so each day was summarised again behind every chunk, at a cost that grows with the
-- month: at 10,000 GPUs in five chunks of 2,000, the summaries took 1, 43, 116, 224 and 318 s of
-- the chunks' 115, 150, 218, 258 and 307 s, on two cores.
--
-- When a day was first marked stale since its last summary is now kept, and the step summarises a
-- stale day only once that mark is as old as a closed day's settling time (`plan::days::SETTLE`),
-- as it already waited that long after a day's end for its first summary. The mark is set once
-- (the writers' `on conflict do nothing`), never updated: the writers of a day do not contend for
-- its row. A stale day is read from the hourly rollups meanwhile, as before.

alter table evidence_day_stale add column marked_at timestamptz not null default now();
