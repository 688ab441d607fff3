-- Books that take their rows from the month rollup's build (issue 42).
--
-- Since 0034 a run from the month rollup wrote a `book_slice` row per team and slice with the
-- build's sums and the names of its day (team name and cost centre, model, kind, profile, the
-- slice's uuid and shares, the node), its days left in the build. At 10,000 GPUs that is 70,000
-- rows joined to the slices, GPUs and teams and written with their index, 0.7-0.95 s of a run of
-- 0.8-1.1 s. Of those names only the team's (display name, cost centre) and the GPU's node can
-- change later; a slice's kind, profile, uuid and shares are its identity (migration 0001) and a
-- GPU's model is its card's.
--
-- Now such a run writes no `book_slice` rows. Its book names the build, as before, and freezes the
-- names that can change at the grain they change at: a row per team (`book_team`) and the node on
-- each card's row (`book_gpu.node`, one per GPU of the build). `book_slice_of_build` (src/db/functions/)
-- joins the build's rows to them, and `book_slice_days` reads it beside the books' own rows: the
-- same rows as before come out. Books written since 0034 with rows of their own (days null) are
-- read as they were; they have no `book_team` rows.
--
-- A build states whether every GPU its slices are on has a card row of its own
-- (`usage_month_build.gpus_cover_slices`): a run from a build that does not (usage on a card that
-- reported no presence) gathers the day rollup, so a slice's row never goes without its node.

create table book_team (
    period      date not null,
    team_id     text not null,
    team_name   text not null,
    cost_center text,
    primary key (period, team_id)
);
create trigger book_team_inserted after insert on book_team
    referencing new table as new_rows for each statement execute function book_rows_inserted();
create trigger book_team_removed after delete on book_team
    referencing old table as old_rows for each statement execute function book_rows_removed();
create trigger book_team_updated after update on book_team
    referencing old table as old_rows new table as new_rows
    for each statement execute function book_rows_updated();

-- The card's node when the books were written: set on the rows a run from a build writes.
alter table book_gpu add column node text;

alter table usage_month_build add column gpus_cover_slices boolean not null default false;
