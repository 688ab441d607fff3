-- Stranded capacity (DESIGN.md, "Stranded capacity and the per-card ledger"): what a GPU's layout
-- leaves that no MIG profile, MPS client or vGPU profile can take, recorded by ingest with the GPU's
-- presence, from the slices each batch says the GPU has (domain::layout). In the units each kind is
-- counted in, so that it is priced exactly with the weights of the rate card in force: MIG compute and
-- memory slices (of the GPU's), MPS thread percent (of 100) and pinned memory bytes (of the GPU's),
-- each times the seconds the layout stood. Presence stored before this migration counts nothing
-- stranded: the layouts of those periods were not kept.
alter table gpu_hourly
    add column stranded_compute_slice_seconds numeric not null default 0,
    add column stranded_memory_slice_seconds numeric not null default 0,
    add column stranded_thread_percent_seconds numeric not null default 0,
    add column stranded_memory_byte_seconds numeric not null default 0;
alter table gpu_daily
    add column stranded_compute_slice_seconds numeric not null default 0,
    add column stranded_memory_slice_seconds numeric not null default 0,
    add column stranded_thread_percent_seconds numeric not null default 0,
    add column stranded_memory_byte_seconds numeric not null default 0;
