-- A MIG slice's GPU instance id as NVML numbers it (issue 14): dcgm-exporter labels its series
-- `GPU_I_ID`, so the fleet API, the usage report and the FOCUS tags carry it for joins with DCGM
-- dashboards. Written when the slice is first registered and never updated: a slice that was stored
-- before its collector sent the id keeps none, so an issued period's exports never change.
alter table slice
    add column gpu_instance_id smallint check (gpu_instance_id between 0 and 63),
    add check (kind = 'mig' or gpu_instance_id is null);
