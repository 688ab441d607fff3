//! Parse, don't validate: a [`Batch`] as sent becomes a [`ValidBatch`] whose every figure obeys the
//! contract and its bounds (`domain::batch::bounds`), or a list naming every bad record and field.
//! Nothing here touches the database, and no figure a collector sends can make it panic: every
//! product and sum of untrusted figures is checked.
//!
//! The file stays whole: [`validate`] is one pass that names every bad field at once, and each check
//! needs what the ones before it found (the GPU a slice is cut from, the slice a window names, the
//! consumer it is held by); split, the batch would be walked several times and the checks drift.

use std::collections::{BTreeMap, HashMap};
use std::ops::RangeInclusive;
use std::str::FromStr;

use chrono::{DateTime, Duration, NaiveDate, Timelike, Utc};
use rust_decimal::Decimal;
use sha2::{Digest, Sha256};

use super::rules::{self, ConsumerClash, SliceUse};
use crate::domain::batch::{Batch, ConsumerReport, SliceReport, bounds, is_node_name};
use crate::domain::fields::FieldError;
use crate::domain::profiles::{self, Instance};
use crate::domain::slice::{GpuGeometry, PhysicalShare, Reservation, SliceKind};
use crate::domain::team::TeamId;
use crate::domain::text;
use crate::domain::time::{Month, seconds_between, start_of};
use crate::domain::window::Window;

/// Limits a batch must keep.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// How far in the future a period may end (collector clocks drift).
    pub max_future_skew: Duration,
    /// The longest period one batch may report on (at most `bounds::MAX_PERIOD_SECONDS`).
    pub max_period: Duration,
    /// The most windows one batch may hold.
    pub max_windows: usize,
    /// Months of raw windows the server keeps before the current one (`None`: all). A batch
    /// starting before them is refused: its month's raw windows are gone, so a re-send could not
    /// be told from new data.
    pub keep_raw_months: Option<u32>,
}

impl Limits {
    /// The first day whose raw windows are kept at `now`, if any are dropped.
    pub fn raw_kept_from(&self, now: DateTime<Utc>) -> Option<NaiveDate> {
        self.keep_raw_months
            .map(|n| Month::of(now).minus(n).first_day())
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_future_skew: Duration::minutes(5),
            max_period: Duration::hours(24),
            max_windows: 100_000,
            keep_raw_months: Some(13),
        }
    }
}

#[derive(Debug, Clone)]
pub struct ValidGpu {
    pub uuid: String,
    pub model: String,
    pub geometry: GpuGeometry,
    pub mig_enabled: bool,
}

#[derive(Debug, Clone)]
pub struct ValidSlice {
    pub uuid: String,
    /// Index into [`ValidBatch::gpus`].
    pub gpu: usize,
    pub reservation: Reservation,
    pub share: PhysicalShare,
    /// A MIG slice's GPU instance id (dcgm-exporter's `GPU_I_ID`), if the collector sent it.
    pub gpu_instance_id: Option<i16>,
}

impl ValidSlice {
    /// What the occupancy rules need to know of it.
    pub fn usage(&self, gpu: &ValidGpu) -> SliceUse {
        SliceUse {
            reserved: self.share.kind.is_reserved(),
            compute_share: self.share.compute,
            memory_share: self.share.memory,
            gpu_memory_bytes: gpu.geometry.memory_bytes,
        }
    }
}

/// A consumer as stored: its identity and the SHA-256 of its canonical JSON.
#[derive(Debug, Clone)]
pub struct ValidConsumer {
    pub report: ConsumerReport,
    pub fingerprint: [u8; 32],
    pub team_label: Option<TeamId>,
}

#[derive(Debug, Clone)]
pub struct ValidBatch {
    pub node: String,
    pub period_start: DateTime<Utc>,
    pub period_end: DateTime<Utc>,
    pub gpus: Vec<ValidGpu>,
    pub slices: Vec<ValidSlice>,
    pub consumers: Vec<ValidConsumer>,
    pub windows: Vec<Window>,
}

/// At most this many field errors are listed; a batch that bad is bad throughout.
const MAX_ERRORS: usize = 500;

struct Errors(Vec<FieldError>, usize);

impl Errors {
    fn push(&mut self, field: impl Into<String>, message: impl Into<String>) {
        if self.0.len() < MAX_ERRORS {
            self.0.push(FieldError::new(field, message));
        } else {
            self.1 += 1;
        }
    }

    fn count(&self) -> usize {
        self.0.len() + self.1
    }

    fn finish(mut self) -> Vec<FieldError> {
        if self.1 > 0 {
            self.0.push(FieldError::new(
                "",
                format!("{} more errors not listed", self.1),
            ));
        }
        self.0
    }
}

/// A JSON number as an exact decimal: the shortest decimal that reads back as the same double.
fn decimal(f: f64) -> Option<Decimal> {
    if !f.is_finite() {
        return None;
    }
    Decimal::from_str(&f.to_string()).ok()
}

/// A timestamp the contract takes: whole microseconds, no leap second, from 2000 on.
/// `field` is named only when the instant is refused (a batch has two instants a window).
fn check_instant(t: DateTime<Utc>, field: impl FnOnce() -> String, errors: &mut Errors) -> bool {
    let nanos = t.nanosecond();
    let why = if nanos >= 1_000_000_000 {
        Some("is a leap second; send the instant after it".to_owned())
    } else if !nanos.is_multiple_of(1000) {
        Some("has a fraction finer than a microsecond; send whole microseconds or coarser".into())
    } else if t < bounds::earliest() {
        Some(format!(
            "is before {}",
            bounds::earliest().format("%Y-%m-%d")
        ))
    } else {
        None
    };
    match why {
        Some(why) => {
            errors.push(field(), format!("{} {why}", t.to_rfc3339()));
            false
        }
        None => true,
    }
}

/// A name: printable, 1 to `max` characters. `field` is named only when the name is refused.
fn check_text(s: &str, max: usize, field: impl FnOnce() -> String, errors: &mut Errors) -> bool {
    match text::check(s, max) {
        Ok(()) => true,
        Err(e) => {
            errors.push(field(), format!("{s:?} {e}", s = preview(s)));
            false
        }
    }
}

/// At most 64 characters of `s`, for messages (a refused string may be megabytes long).
fn preview(s: &str) -> String {
    if s.chars().count() <= 64 {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(64).collect::<String>())
    }
}

/// Checks a batch against the contract at `now`. Errors name every bad record and field.
// long: the contract's rules one after another, in the order DESIGN.md lists them, each naming its
// field; every rule reads the tables of GPUs, slices and windows built as it goes
pub fn validate(
    batch: Batch,
    now: DateTime<Utc>,
    limits: &Limits,
) -> Result<ValidBatch, Vec<FieldError>> {
    let mut errors = Errors(Vec::new(), 0);

    if !is_node_name(&batch.node) {
        errors.push(
            "node",
            format!(
                "{:?} is not a node name: use 1 to 253 letters, digits, '.', '-' or '_'",
                preview(&batch.node)
            ),
        );
    }
    let (start, end) = (batch.period.start, batch.period.end);
    let times_ok = check_instant(start, || "period.start".into(), &mut errors)
        & check_instant(end, || "period.end".into(), &mut errors);
    if end <= start {
        errors.push(
            "period.end",
            format!("period end {end} is not after its start {start}"),
        );
    } else if end - start > limits.max_period {
        errors.push(
            "period",
            format!(
                "the period spans {}, longer than the limit of {}",
                human(end - start),
                human(limits.max_period)
            ),
        );
    }
    if let Some(kept) = limits.raw_kept_from(now)
        && times_ok
        && start < start_of(kept)
    {
        errors.push(
            "period.start",
            format!(
                "{} is older than the raw windows this server keeps (from {kept} on, {} months before this one); it cannot be checked against what was stored",
                start.to_rfc3339(),
                limits.keep_raw_months.unwrap_or_default()
            ),
        );
    }
    if end > now + limits.max_future_skew {
        errors.push(
            "period.end",
            format!(
                "period end {end} is in the future (server time {now}, allowed skew {})",
                human(limits.max_future_skew)
            ),
        );
    }
    if batch.windows.len() > limits.max_windows {
        errors.push(
            "windows",
            format!(
                "the batch holds {} windows, more than the limit of {}; send smaller batches",
                batch.windows.len(),
                limits.max_windows
            ),
        );
        return Err(errors.finish());
    }
    let period_ok = times_ok && end > start;

    // GPUs.
    let mut gpus = Vec::with_capacity(batch.gpus.len());
    let mut gpu_index: HashMap<&str, usize> = HashMap::new();
    // Each valid GPU's index in the batch.
    let mut gpu_at: Vec<usize> = Vec::with_capacity(batch.gpus.len());
    for (i, g) in batch.gpus.iter().enumerate() {
        let at = |f: &str| format!("gpus[{i}].{f}");
        let mut ok = check_text(
            &g.uuid,
            bounds::MAX_GPU_UUID_CHARS,
            || at("uuid"),
            &mut errors,
        );
        if ok && let Some(prev) = gpu_index.get(g.uuid.as_str()) {
            errors.push(at("uuid"), format!("{} repeats gpus[{prev}]", g.uuid));
            ok = false;
        }
        ok &= check_text(
            &g.model,
            bounds::MAX_MODEL_CHARS,
            || at("model"),
            &mut errors,
        );
        if !(1..=bounds::MAX_GPU_MEMORY_BYTES).contains(&g.memory_bytes) {
            errors.push(
                at("memory_bytes"),
                format!(
                    "memory_bytes must be 1 to {} (4 TiB), got {}",
                    bounds::MAX_GPU_MEMORY_BYTES,
                    g.memory_bytes
                ),
            );
            ok = false;
        }
        for (name, v) in [
            ("compute_slices", g.compute_slices),
            ("memory_slices", g.memory_slices),
        ] {
            if !(1..=8).contains(&v) {
                errors.push(at(name), format!("{name} must be 1 to 8, got {v}"));
                ok = false;
            }
        }
        if ok {
            gpu_index.insert(&g.uuid, gpus.len());
            gpu_at.push(i);
            gpus.push(ValidGpu {
                uuid: g.uuid.clone(),
                model: g.model.clone(),
                geometry: GpuGeometry {
                    memory_bytes: g.memory_bytes as u64,
                    compute_slices: g.compute_slices as u8,
                    memory_slices: g.memory_slices as u8,
                },
                mig_enabled: g.mig_enabled,
            });
        } else {
            // Keep the uuid known so that its slices are not also reported as on an unknown GPU.
            gpu_index.entry(&g.uuid).or_insert(usize::MAX);
        }
    }

    // Slices.
    let mut slices = Vec::with_capacity(batch.slices.len());
    let mut slice_index: HashMap<&str, usize> = HashMap::new();
    // Each valid slice's index in the batch.
    let mut slice_at: Vec<usize> = Vec::with_capacity(batch.slices.len());
    let mut mig_by_gpu: BTreeMap<usize, Vec<Instance>> = BTreeMap::new();
    // Each GPU's instance ids so far, and the slice that has each.
    let mut gpu_instances: HashMap<(usize, i16), usize> = HashMap::new();
    for (i, s) in batch.slices.iter().enumerate() {
        let at = |f: &str| format!("slices[{i}].{f}");
        let mut ok = check_text(
            &s.uuid,
            bounds::MAX_SLICE_UUID_CHARS,
            || at("uuid"),
            &mut errors,
        );
        if ok && slice_index.contains_key(s.uuid.as_str()) {
            errors.push(at("uuid"), format!("{} repeats an earlier slice", s.uuid));
            ok = false;
        }
        let gpu = match gpu_index.get(s.gpu_uuid.as_str()) {
            Some(&g) if g != usize::MAX => Some(g),
            Some(_) => None,
            None => {
                errors.push(
                    at("gpu_uuid"),
                    format!(
                        "slice on an unknown GPU: {:?} is not among this batch's gpus",
                        preview(&s.gpu_uuid)
                    ),
                );
                None
            }
        };
        let kind = match SliceKind::from_str(&s.kind) {
            Ok(k) => Some(k),
            Err(_) => {
                errors.push(
                    at("kind"),
                    format!(
                        "unknown slice kind {:?}: expected one of mig, mps, timeslice, vgpu, whole",
                        preview(&s.kind)
                    ),
                );
                None
            }
        };
        let reservation = match (gpu, kind) {
            (Some(g), Some(kind)) => reservation(s, kind, &gpus[g], &at, &mut errors),
            _ => None,
        };
        let gpu_instance_id = match (s.gpu_instance_id, kind) {
            (None, _) => None,
            (Some(_), Some(k)) if k != SliceKind::Mig => {
                errors.push(
                    at("gpu_instance_id"),
                    format!("only a mig slice has a GPU instance id, and this one is {k}"),
                );
                ok = false;
                None
            }
            (Some(id), _) if !(0..=bounds::MAX_GPU_INSTANCE_ID).contains(&id) => {
                errors.push(
                    at("gpu_instance_id"),
                    format!(
                        "gpu_instance_id must be 0 to {}, got {id}",
                        bounds::MAX_GPU_INSTANCE_ID
                    ),
                );
                ok = false;
                None
            }
            (Some(id), _) => {
                let id = id as i16;
                let clash = gpu.and_then(|g| gpu_instances.get(&(g, id)));
                if let Some(earlier) = clash {
                    errors.push(
                        at("gpu_instance_id"),
                        format!(
                            "GPU instance {id} is already slices[{earlier}] on {}",
                            s.gpu_uuid
                        ),
                    );
                    ok = false;
                }
                Some(id)
            }
        };
        match (ok, gpu, reservation) {
            (true, Some(g), Some(r)) => {
                if let Some(id) = gpu_instance_id {
                    gpu_instances.insert((g, id), i);
                }
                if let Reservation::Mig {
                    compute_slices,
                    memory_slices,
                    ..
                } = r
                {
                    mig_by_gpu.entry(g).or_default().push(Instance {
                        compute_slices,
                        memory_slices,
                    });
                }
                slice_index.insert(&s.uuid, slices.len());
                slice_at.push(i);
                slices.push(ValidSlice {
                    uuid: s.uuid.clone(),
                    gpu: g,
                    share: r.physical_share(&gpus[g].geometry),
                    reservation: r,
                    gpu_instance_id,
                });
            }
            _ => {
                slice_index.entry(&s.uuid).or_insert(usize::MAX);
            }
        }
    }
    for (g, instances) in &mig_by_gpu {
        let geo = gpus[*g].geometry;
        if let Err(e) = profiles::check_layout(instances, geo.compute_slices, geo.memory_slices) {
            errors.push(
                format!("gpus[{}]", gpu_at[*g]),
                format!(
                    "the MIG instances reported on {} cannot coexist: {e}",
                    gpus[*g].uuid
                ),
            );
        }
    }
    // A card is reserved at most once: MIG, whole, vGPU fractions, MPS threads and pinned memory.
    for (g, gpu) in gpus.iter().enumerate() {
        let on_gpu: Vec<usize> = (0..slices.len()).filter(|&k| slices[k].gpu == g).collect();
        let reserved = rules::reserved(
            &gpu.geometry,
            on_gpu.iter().map(|&k| &slices[k].reservation),
        );
        if let Some(r) = reserved
            && !r.exceeds_the_card()
        {
            continue;
        }
        let named: Vec<String> = on_gpu
            .iter()
            .filter(|&&k| slices[k].share.kind.is_reserved())
            .map(|&k| format!("slices[{}]", slice_at[k]))
            .collect();
        let how = match reserved {
            Some(r) => format!(
                "{} of its compute and {} of its memory",
                percent(r.compute),
                percent(r.memory)
            ),
            None => "more than the contract's figures allow".to_owned(),
        };
        for f in &named {
            errors.push(
                f.clone(),
                format!(
                    "the reserved slices of {} ({}) take {how}; a card cannot be reserved past itself",
                    gpu.uuid,
                    named.join(", ")
                ),
            );
        }
    }

    // Windows and their consumers.
    let mut consumers: Vec<ValidConsumer> = Vec::new();
    let mut consumer_index: HashMap<ConsumerReport, usize> = HashMap::new();
    let mut windows = Vec::with_capacity(batch.windows.len());
    let mut first_at: HashMap<(usize, usize, DateTime<Utc>), usize> = HashMap::new();
    for (i, w) in batch.windows.into_iter().enumerate() {
        let at = |f: &str| format!("windows[{i}].{f}");
        let mut ok = true;
        let slice = match slice_index.get(w.slice_uuid.as_str()) {
            Some(&s) if s != usize::MAX => Some(s),
            Some(_) => None,
            None => {
                errors.push(
                    at("slice_uuid"),
                    format!(
                        "window of an unknown slice: {:?} is not among this batch's slices",
                        preview(&w.slice_uuid)
                    ),
                );
                None
            }
        };
        ok &= check_instant(w.start, || at("start"), &mut errors);
        ok &= check_instant(w.end, || at("end"), &mut errors);
        if w.end <= w.start {
            errors.push(
                at("end"),
                format!("window end {} is not after its start {}", w.end, w.start),
            );
            ok = false;
        } else if period_ok && (w.start < start || w.end > end) {
            errors.push(
                at("start"),
                format!(
                    "window [{}, {}) lies outside the batch period [{start}, {end})",
                    w.start, w.end
                ),
            );
            ok = false;
        }
        let held = figure(w.held_seconds, "held_seconds", &at, &mut errors);
        let memory = figure(
            w.memory_byte_seconds,
            "memory_byte_seconds",
            &at,
            &mut errors,
        );
        let compute = w
            .compute_active_seconds
            .map(|c| figure(c, "compute_active_seconds", &at, &mut errors));
        // What the window's memory is measured against: the slice's reservation, or the whole GPU
        // for a time-sliced replica.
        let reserved_memory = slice.map(|s| slices[s].share.memory_reserved_bytes);
        if w.memory_peak_bytes < 0 {
            errors.push(
                at("memory_peak_bytes"),
                format!(
                    "memory_peak_bytes must not be negative, got {}",
                    w.memory_peak_bytes
                ),
            );
            ok = false;
        } else if let Some(reserved) = reserved_memory
            && w.memory_peak_bytes as u64 > reserved
        {
            errors.push(
                at("memory_peak_bytes"),
                format!(
                    "memory_peak_bytes ({}) exceeds the {reserved} bytes the slice can use",
                    w.memory_peak_bytes
                ),
            );
            ok = false;
        }
        if let (Some(h), true) = (held, w.end > w.start) {
            let length = seconds_between(w.start, w.end);
            if h > length {
                errors.push(
                    at("held_seconds"),
                    format!("held_seconds ({h}) exceeds the window's length ({length} s)"),
                );
                ok = false;
            }
        }
        if let (Some(h), Some(Some(c))) = (held, compute)
            && c > h
        {
            errors.push(
                at("compute_active_seconds"),
                format!("compute_active_seconds ({c}) exceeds held_seconds ({h})"),
            );
            ok = false;
        }
        if let (Some(h), Some(m), Some(reserved)) = (held, memory, reserved_memory) {
            match Decimal::from(reserved).checked_mul(h) {
                Some(most) if m <= most => {}
                most => {
                    errors.push(
                        at("memory_byte_seconds"),
                        format!(
                            "memory_byte_seconds ({m}) exceeds the slice's {reserved} bytes for the {h} s held{}",
                            most.map(|x| format!(" ({x})")).unwrap_or_default()
                        ),
                    );
                    ok = false;
                }
            }
        }
        // A consumer already taken from an earlier window passed these checks there: most
        // windows of a batch repeat one of a few consumers.
        let known = consumer_index.get(&w.consumer).copied();
        let team_label = if known.is_some() {
            None
        } else {
            ok &= check_consumer(&w.consumer, &at, &mut errors);
            match w.consumer.team_label().map(TeamId::parse) {
                Some(Err(e)) => {
                    errors.push(at("consumer.labels.team"), e.to_string());
                    ok = false;
                    None
                }
                Some(Ok(t)) => Some(t),
                None => None,
            }
        };
        let (Some(slice), Some(held), Some(memory), true) = (slice, held, memory, ok) else {
            continue;
        };
        let Some(compute) = compute.map_or(Some(None), |c| c.map(Some)) else {
            continue;
        };
        let consumer = match known {
            Some(c) => c,
            None => {
                let c = consumers.len();
                consumers.push(ValidConsumer {
                    fingerprint: fingerprint(&w.consumer),
                    report: w.consumer.clone(),
                    team_label,
                });
                consumer_index.insert(w.consumer, c);
                c
            }
        };
        if let Some(prev) = first_at.insert((slice, consumer, w.start), i) {
            errors.push(
                at("start"),
                format!("repeats windows[{prev}]: same slice, consumer and start"),
            );
            continue;
        }
        let window = Window {
            slice,
            consumer,
            start: w.start,
            end: w.end,
            held_seconds: held,
            memory_byte_seconds: memory,
            memory_peak_bytes: w.memory_peak_bytes,
            compute_active_seconds: compute,
            hours: Vec::new(),
        };
        let Some(window) = window.hourly() else {
            errors.push(
                at("memory_byte_seconds"),
                "the window's figures are too large to add up exactly",
            );
            continue;
        };
        windows.push((i, window));
    }

    // One consumer at a time, and no more of a card used in an hour than it had.
    let placed: Vec<(usize, &Window)> = windows.iter().map(|(i, w)| (*i, w)).collect();
    for clash in rules::consumer_clashes(&placed) {
        match clash {
            ConsumerClash::Overlap { earlier, later } => errors.push(
                format!("windows[{later}].start"),
                format!(
                    "overlaps windows[{earlier}] of the same slice: a slice has one holder at a time"
                ),
            ),
            ConsumerClash::OverHeld {
                windows: ws,
                held,
                length,
            } => {
                let names: Vec<String> = ws.iter().map(|i| format!("windows[{i}]")).collect();
                for i in &ws {
                    errors.push(
                        format!("windows[{i}].held_seconds"),
                        format!(
                            "{} hold the same slice over the same {length} s for {held} s together: a slice has one holder at a time",
                            names.join(", ")
                        ),
                    );
                }
            }
        }
    }
    if period_ok {
        let uses: Vec<SliceUse> = slices.iter().map(|s| s.usage(&gpus[s.gpu])).collect();
        for (g, gpu) in gpus.iter().enumerate() {
            let on_gpu: Vec<(usize, &Window)> = placed
                .iter()
                .copied()
                .filter(|(_, w)| slices[w.slice].gpu == g)
                .collect();
            for o in rules::hourly_overruns(start, end, &uses, &on_gpu) {
                let names: Vec<String> =
                    o.windows.iter().map(|i| format!("windows[{i}]")).collect();
                for i in &o.windows {
                    errors.push(
                        format!("windows[{i}]"),
                        format!(
                            "the windows of {} ({}) use {} s of its {} in the hour from {}, which had {} s of it (time-sliced replicas pay what they use, so together they fit the card)",
                            gpu.uuid,
                            names.join(", "),
                            o.used_seconds.round_dp(6).normalize(),
                            o.what,
                            o.hour,
                            o.available_seconds
                        ),
                    );
                }
            }
        }
    }

    let errors = errors.finish();
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(ValidBatch {
        node: batch.node,
        period_start: start,
        period_end: end,
        gpus,
        slices,
        consumers,
        windows: windows.into_iter().map(|(_, w)| w).collect(),
    })
}

fn percent(d: Decimal) -> String {
    format!("{} %", (d * Decimal::ONE_HUNDRED).round_dp(2).normalize())
}

fn human(d: Duration) -> String {
    humantime::format_duration(d.to_std().unwrap_or_default()).to_string()
}

/// The consumer's names and labels: printable and within Kubernetes' lengths.
fn check_consumer(c: &ConsumerReport, at: &dyn Fn(&str) -> String, errors: &mut Errors) -> bool {
    let before = errors.count();
    if !c.names_someone() {
        errors.push(
            at("consumer"),
            "the consumer names no holder: give a namespace or pod, a unix_user, a job_id or a dra_claim",
        );
    }
    for (name, v) in [
        ("namespace", &c.namespace),
        ("pod", &c.pod),
        ("container", &c.container),
        ("unix_user", &c.unix_user),
        ("job_id", &c.job_id),
    ] {
        if let Some(v) = v {
            check_text(
                v,
                bounds::MAX_NAME_CHARS,
                || at(&format!("consumer.{name}")),
                errors,
            );
        }
    }
    if let Some(d) = &c.dra_claim {
        for (name, v) in [
            ("namespace", Some(&d.namespace)),
            ("name", Some(&d.name)),
            ("driver", d.driver.as_ref()),
            ("pool", d.pool.as_ref()),
            ("device", d.device.as_ref()),
        ] {
            if let Some(v) = v {
                check_text(
                    v,
                    bounds::MAX_NAME_CHARS,
                    || at(&format!("consumer.dra_claim.{name}")),
                    errors,
                );
            }
        }
    }
    if c.labels.len() > bounds::MAX_LABELS {
        errors.push(
            at("consumer.labels"),
            format!(
                "{} labels, more than the limit of {}",
                c.labels.len(),
                bounds::MAX_LABELS
            ),
        );
    }
    for (k, v) in c.labels.iter().take(bounds::MAX_LABELS + 1) {
        let field = || at(&format!("consumer.labels.{}", preview(k)));
        if check_text(k, bounds::MAX_LABEL_KEY_CHARS, field, errors)
            && let Err(e) = text::check_optional(v, bounds::MAX_LABEL_VALUE_CHARS)
        {
            errors.push(field(), format!("the value {:?} {e}", preview(v)));
        }
    }
    errors.count() == before
}

/// A non-negative, finite figure as an exact decimal.
fn figure(v: f64, name: &str, at: &dyn Fn(&str) -> String, errors: &mut Errors) -> Option<Decimal> {
    if v.is_sign_negative() && v != 0.0 {
        errors.push(at(name), format!("{name} must not be negative, got {v}"));
        return None;
    }
    match decimal(v) {
        Some(d) => Some(d),
        None => {
            errors.push(at(name), format!("{name} is out of range: {v}"));
            None
        }
    }
}

fn reservation(
    s: &SliceReport,
    kind: SliceKind,
    gpu: &ValidGpu,
    at: &dyn Fn(&str) -> String,
    errors: &mut Errors,
) -> Option<Reservation> {
    let before = errors.count();
    let required =
        |errors: &mut Errors, name: &str, v: Option<i64>, range: RangeInclusive<i64>| match v {
            None => {
                errors.push(at(name), format!("a {kind} slice needs {name}"));
                None
            }
            Some(v) if !range.contains(&v) => {
                errors.push(
                    at(name),
                    format!(
                        "{name} must be {} to {}, got {v}",
                        range.start(),
                        range.end()
                    ),
                );
                None
            }
            Some(v) => Some(v),
        };
    let geo = gpu.geometry;
    let memory = geo.memory_bytes as i64;
    let r = match kind {
        SliceKind::Mig => {
            let c = required(
                errors,
                "compute_slices",
                s.compute_slices,
                1..=i64::from(geo.compute_slices),
            );
            let m = required(
                errors,
                "memory_slices",
                s.memory_slices,
                1..=i64::from(geo.memory_slices),
            );
            let b = required(errors, "memory_bytes", s.memory_bytes, 1..=memory);
            let profile = match &s.profile {
                Some(p) if check_text(p, bounds::MAX_PROFILE_CHARS, || at("profile"), errors) => {
                    Some(p.clone())
                }
                Some(_) => None,
                None => {
                    errors.push(
                        at("profile"),
                        "a mig slice needs its profile name (1 to 64 characters), e.g. 3g.40gb",
                    );
                    None
                }
            };
            let profile_id = match s.profile_id {
                None => None,
                Some(id) => required(errors, "profile_id", Some(id), 0..=1023).map(|id| id as u32),
            };
            if !gpu.mig_enabled {
                errors.push(
                    at("kind"),
                    format!("a mig slice on {}, whose mig_enabled is false", gpu.uuid),
                );
            }
            Reservation::Mig {
                profile: profile?,
                profile_id,
                compute_slices: c? as u8,
                memory_slices: m? as u8,
                memory_bytes: b? as u64,
            }
        }
        SliceKind::Mps => {
            let t = required(
                errors,
                "active_thread_percentage",
                s.active_thread_percentage,
                1..=100,
            );
            let p = required(
                errors,
                "pinned_memory_bytes",
                s.pinned_memory_bytes,
                1..=memory,
            );
            Reservation::Mps {
                active_thread_percentage: t? as u8,
                pinned_memory_bytes: p? as u64,
            }
        }
        SliceKind::Vgpu => {
            let fraction = match s.fraction.and_then(decimal) {
                Some(f) if f <= Decimal::ZERO || f > Decimal::ONE => {
                    errors.push(
                        at("fraction"),
                        format!("fraction must be in (0, 1], got {f}"),
                    );
                    None
                }
                Some(f) if f.normalize().scale() > bounds::MAX_FRACTION_DECIMALS => {
                    errors.push(
                        at("fraction"),
                        format!(
                            "fraction {f} has more than {} decimals",
                            bounds::MAX_FRACTION_DECIMALS
                        ),
                    );
                    None
                }
                Some(f) => Some(f),
                None => {
                    errors.push(
                        at("fraction"),
                        "a vgpu slice needs a finite fraction in (0, 1]",
                    );
                    None
                }
            };
            Reservation::Vgpu {
                fraction: fraction?,
            }
        }
        SliceKind::Timeslice => {
            let n = required(errors, "replicas", s.replicas, 1..=1024);
            let k = required(errors, "replica", s.replica, 0..=n.unwrap_or(1024) - 1);
            Reservation::Timeslice {
                replicas: n? as u16,
                replica: k? as u16,
            }
        }
        SliceKind::Whole => Reservation::Whole,
    };
    (errors.count() == before).then_some(r)
}

/// SHA-256 of the consumer's canonical JSON: fields in declaration order, labels sorted by key.
pub fn fingerprint(c: &ConsumerReport) -> [u8; 32] {
    let json = serde_json::to_vec(c).expect("a consumer serialises");
    Sha256::digest(json).into()
}
