-- workload_of: its current definition, applied by `db::migrate` after the migrations (last
-- changed by migrations/0012_workloads.sql). Change it here; see docs/architecture.md, Storage.
-- A consumer's workload (issue 13): the pod's owner where its labels say it, else the pod; off
-- Kubernetes the job, else the unix user. One home for the rule, used by right-sizing and by the
-- usage report's `workload` group.
--
-- Kubernetes stamps the owner into the labels of the pods it makes:
--   * a label `slicemeter.io/workload` names it outright (kind `Workload`);
--   * Jobs' pods carry `batch.kubernetes.io/job-name` (or the older `job-name`): kind `Job`;
--   * Deployments' pods carry `pod-template-hash` H and are named `<deployment>-H-<5 chars>`:
--     kind `Deployment`;
--   * StatefulSets' pods carry `statefulset.kubernetes.io/pod-name` and are named
--     `<statefulset>-<ordinal>`: kind `StatefulSet`;
--   * other pods (bare, or an owner the labels do not say): the pod itself, kind `Pod`.
-- Returns {kind, name}; null when the consumer names no pod, job or user.
create or replace function workload_of(pod text, labels jsonb, job_id text, unix_user text)
returns text[] language sql immutable parallel safe as $$
    select case
        when labels ? 'slicemeter.io/workload'
            then array['Workload', labels->>'slicemeter.io/workload']
        when labels ? 'batch.kubernetes.io/job-name'
            then array['Job', labels->>'batch.kubernetes.io/job-name']
        when labels ? 'job-name'
            then array['Job', labels->>'job-name']
        when pod is not null and length(labels->>'pod-template-hash') > 0
             and length(pod) > length(labels->>'pod-template-hash') + 7
             and substr(pod, length(pod) - length(labels->>'pod-template-hash') - 6,
                        length(labels->>'pod-template-hash') + 2)
                 = '-' || (labels->>'pod-template-hash') || '-'
             and right(pod, 5) ~ '^[a-z0-9]{5}$'
            then array['Deployment',
                       left(pod, length(pod) - length(labels->>'pod-template-hash') - 7)]
        when pod is not null and labels ? 'statefulset.kubernetes.io/pod-name' and pod ~ '-[0-9]+$'
            then array['StatefulSet', regexp_replace(pod, '-[0-9]+$', '')]
        when pod is not null then array['Pod', pod]
        when job_id is not null then array['Job', job_id]
        when unix_user is not null then array['User', unix_user]
    end
$$;
