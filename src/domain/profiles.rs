//! NVIDIA's MIG profile and placement tables (`data/*.csv`, copies of `shared/data/`), embedded in the
//! binary: the simulator cuts GPUs with them, and the NVML source names instances by their slice counts.

use std::sync::LazyLock;

use rust_decimal::Decimal;
use serde::Deserialize;

const PROFILES_CSV: &str = include_str!("../../data/mig-profiles.csv");
const PLACEMENTS_CSV: &str = include_str!("../../data/mig-placements.csv");

/// One row of NVIDIA's profile tables: a GPU-instance profile of one GPU model.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct MigProfile {
    /// The table's model key, e.g. `H100-SXM5-80GB` (see [`table_model`] for NVML names).
    pub gpu_model: String,
    /// e.g. `3g.40gb`.
    pub profile: String,
    /// The id `nvidia-smi mig -cgi` takes on this model.
    pub profile_id: u32,
    pub compute_slices: u8,
    pub total_compute_slices: u8,
    pub memory_slices: u8,
    pub total_memory_slices: u8,
    pub memory_gib: Decimal,
    pub sm: u32,
    pub copy_engines: u32,
    pub max_instances: u32,
}

impl MigProfile {
    /// The memory the driver reports for an instance of this profile, in bytes.
    pub fn memory_bytes(&self) -> u64 {
        (self.memory_gib * Decimal::from(1u64 << 30))
            .floor()
            .try_into()
            .expect("profile memory fits in u64")
    }
}

/// Where instances of a profile may start on the memory-slice axis of a 7-compute/8-memory GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    pub profile_id: u32,
    pub starts: Vec<u8>,
    pub size: u8,
}

#[derive(Debug, Deserialize)]
struct PlacementRow {
    profile_id: u32,
    #[allow(dead_code)]
    profile_kind: String,
    starts: String,
    size: u8,
}

fn reader(text: &'static str) -> csv::Reader<&'static [u8]> {
    csv::ReaderBuilder::new()
        .comment(Some(b'#'))
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes())
}

static PROFILES: LazyLock<Vec<MigProfile>> = LazyLock::new(|| {
    reader(PROFILES_CSV)
        .deserialize()
        .collect::<Result<_, _>>()
        .expect("the embedded MIG profile table parses")
});

static PLACEMENTS: LazyLock<Vec<Placement>> = LazyLock::new(|| {
    reader(PLACEMENTS_CSV)
        .deserialize::<PlacementRow>()
        .map(|row| {
            let row = row.expect("the embedded MIG placement table parses");
            Placement {
                profile_id: row.profile_id,
                starts: row
                    .starts
                    .split_whitespace()
                    .map(|s| s.parse().expect("placement start is a number"))
                    .collect(),
                size: row.size,
            }
        })
        .collect()
});

/// Every profile of every model in the table.
pub fn all() -> &'static [MigProfile] {
    &PROFILES
}

/// The profiles of one table model, in table order.
pub fn of_model(table_model: &str) -> impl Iterator<Item = &'static MigProfile> {
    PROFILES.iter().filter(move |p| p.gpu_model == table_model)
}

pub fn by_id(table_model: &str, profile_id: u32) -> Option<&'static MigProfile> {
    of_model(table_model).find(|p| p.profile_id == profile_id)
}

pub fn by_name(table_model: &str, profile: &str) -> Option<&'static MigProfile> {
    of_model(table_model).find(|p| p.profile == profile)
}

/// What a GPU name must contain for [`table_model`] to know it (case-insensitive): a reader that
/// needs a GPU's memory series only for models outside the tables can ask for just those.
pub const TABLE_MODEL_NEEDLES: [&str; 6] = ["H200", "H100", "A100", "A30", "B200", "RTX PRO 6000"];

/// The table's model key for a GPU name as NVML reports it (`NVIDIA H100 80GB HBM3`), if the table
/// knows the model. Unknown models still work everywhere; they only lack profile names.
pub fn table_model(nvml_name: &str) -> Option<&'static str> {
    let n = nvml_name.to_ascii_uppercase();
    let model = if n.contains("H200") {
        "H200-141GB"
    } else if n.contains("H100") && n.contains("NVL") {
        "H100-NVL-94GB"
    } else if n.contains("H100") {
        "H100-SXM5-80GB"
    } else if n.contains("A100") && n.contains("40GB") {
        "A100-SXM4-40GB"
    } else if n.contains("A100") {
        "A100-SXM4-80GB"
    } else if n.contains("A30") {
        "A30"
    } else if n.contains("B200") {
        "B200-180GB"
    } else if n.contains("RTX PRO 6000") {
        "RTX-PRO-6000-Blackwell"
    } else {
        return None;
    };
    Some(model)
}

/// NVML's memory figure for the GPUs whose drivers were read: `NVIDIA H100 80GB HBM3`, `NVIDIA H200`
/// and `NVIDIA A100-SXM4-80GB`.
const NVML_MEMORY_BYTES: [(&str, u64); 3] = [
    ("H100-SXM5-80GB", 85_520_809_984),
    ("H200-141GB", 150_754_820_096),
    ("A100-SXM4-80GB", 85_899_345_920),
];

/// The memory of a GPU of a table model, in bytes: NVML's figure where it was read, else the
/// whole-card profile's memory rounded up to a whole GiB (NVML's figure on the A100 40GB and A30;
/// a little above it on the other models). A source that cannot ask the driver (dcgm-exporter
/// gives no GPU-level memory on a MIG GPU) reports this, the same every time.
pub fn memory_bytes(table_model: &str) -> u64 {
    if let Some((_, bytes)) = NVML_MEMORY_BYTES.iter().find(|(m, _)| *m == table_model) {
        return *bytes;
    }
    of_model(table_model)
        .filter(|p| p.compute_slices == p.total_compute_slices)
        .map(|p| p.memory_gib.ceil())
        .max()
        .and_then(|gib| u64::try_from(gib).ok())
        .map_or(0, |gib| gib << 30)
}

/// Why a set of MIG instances cannot coexist on one GPU.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LayoutError {
    #[error("the instances use {used} compute slices, the GPU has {total}")]
    TooManyComputeSlices { used: u32, total: u8 },
    #[error("the instances use {used} memory slices, the GPU has {total}")]
    TooManyMemorySlices { used: u32, total: u8 },
    #[error("no placement of the instances fits NVIDIA's placement table")]
    NoPlacement,
}

/// One instance of a layout, by its slice counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Instance {
    pub compute_slices: u8,
    pub memory_slices: u8,
}

/// Checks that the instances fit a GPU with `total_compute` compute and `total_memory` memory slices.
/// On the 7/8 geometry every instance must also find a free place in NVIDIA's placement table; other
/// geometries (A30, RTX PRO 6000) are checked by slice counts alone, the table holding no placements
/// for them. Returns the memory-slice start of each instance where placements were checked.
pub fn check_layout(
    instances: &[Instance],
    total_compute: u8,
    total_memory: u8,
) -> Result<Option<Vec<u8>>, LayoutError> {
    let compute: u32 = instances.iter().map(|i| u32::from(i.compute_slices)).sum();
    let memory: u32 = instances.iter().map(|i| u32::from(i.memory_slices)).sum();
    if compute > u32::from(total_compute) {
        return Err(LayoutError::TooManyComputeSlices {
            used: compute,
            total: total_compute,
        });
    }
    if memory > u32::from(total_memory) {
        return Err(LayoutError::TooManyMemorySlices {
            used: memory,
            total: total_memory,
        });
    }
    if (total_compute, total_memory) != (7, 8) {
        return Ok(None);
    }
    let mut options = Vec::with_capacity(instances.len());
    for inst in instances {
        options.push(placement_for(*inst).ok_or(LayoutError::NoPlacement)?);
    }
    // Place the largest instances first: fewer choices, so the search prunes early.
    let mut order: Vec<usize> = (0..instances.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(options[i].size));
    let mut starts = vec![0u8; instances.len()];
    if place(&order, &options, 0, 0, &mut starts) {
        Ok(Some(starts))
    } else {
        Err(LayoutError::NoPlacement)
    }
}

/// The placement row for an instance of the 7/8 geometry, found through the profile whose slice
/// counts match (profile ids are the same on every 7/8 model).
fn placement_for(inst: Instance) -> Option<&'static Placement> {
    let id = PROFILES
        .iter()
        .filter(|p| p.total_compute_slices == 7 && p.total_memory_slices == 8)
        .find(|p| {
            p.compute_slices == inst.compute_slices
                && p.memory_slices == inst.memory_slices
                && !p.profile.ends_with("+me")
        })?
        .profile_id;
    PLACEMENTS.iter().find(|pl| pl.profile_id == id)
}

fn place(
    order: &[usize],
    options: &[&Placement],
    depth: usize,
    used: u8,
    starts: &mut [u8],
) -> bool {
    let Some(&i) = order.get(depth) else {
        return true;
    };
    let p = options[i];
    for &start in &p.starts {
        let mask = (((1u16 << p.size) - 1) << start) as u8;
        if used & mask == 0 {
            starts[i] = start;
            if place(order, options, depth + 1, used | mask, starts) {
                return true;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inst(c: u8, m: u8) -> Instance {
        Instance {
            compute_slices: c,
            memory_slices: m,
        }
    }

    #[test]
    fn the_embedded_tables_match_the_shared_reference_data() {
        for (name, embedded) in [
            ("mig-profiles.csv", PROFILES_CSV),
            ("mig-placements.csv", PLACEMENTS_CSV),
        ] {
            // NVIDIA's tables as the project keeps them beside the repository, or in
            // SLICEMETER_MIG_DATA for a checkout elsewhere: missing is a failure, not a pass.
            let dir = std::env::var("SLICEMETER_MIG_DATA").unwrap_or_else(|_| {
                concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data").to_owned()
            });
            let shared = std::path::Path::new(&dir).join(name);
            let text = std::fs::read_to_string(&shared).unwrap_or_else(|e| {
                panic!(
                    "the shared reference table is expected at {} (or set SLICEMETER_MIG_DATA): {e}",
                    shared.display()
                )
            });
            assert_eq!(
                text,
                embedded,
                "data/{name} differs from {}",
                shared.display()
            );
        }
    }

    #[test]
    fn the_h100_3g_40gb_profile_has_id_9_and_39_5_gib() {
        let p = by_name("H100-SXM5-80GB", "3g.40gb").unwrap();
        assert_eq!((p.profile_id, p.compute_slices, p.memory_slices), (9, 3, 4));
        assert_eq!(p.memory_bytes(), 42_412_802_048);
        assert_eq!(by_id("H200-141GB", 19).unwrap().profile, "1g.18gb");
    }

    #[test]
    fn nvml_names_map_to_table_models() {
        assert_eq!(table_model("NVIDIA H100 80GB HBM3"), Some("H100-SXM5-80GB"));
        assert_eq!(table_model("NVIDIA H100 NVL"), Some("H100-NVL-94GB"));
        assert_eq!(table_model("NVIDIA H200"), Some("H200-141GB"));
        assert_eq!(table_model("NVIDIA A100-SXM4-80GB"), Some("A100-SXM4-80GB"));
        assert_eq!(table_model("NVIDIA A100-PCIE-40GB"), Some("A100-SXM4-40GB"));
        assert_eq!(table_model("Tesla T4"), None);
    }

    #[test]
    fn layouts_from_nvidias_guide_find_a_placement() {
        // 3g+2g+1g+1g, 7x1g, 4g+3g, 3g+1g+1g (`-cgi 9,19,19`), 7g
        for layout in [
            vec![inst(3, 4), inst(2, 2), inst(1, 1), inst(1, 1)],
            vec![inst(1, 1); 7],
            vec![inst(4, 4), inst(3, 4)],
            vec![inst(3, 4), inst(1, 1), inst(1, 1)],
            vec![inst(7, 8)],
            vec![inst(1, 2); 4],
        ] {
            let starts = check_layout(&layout, 7, 8)
                .unwrap_or_else(|e| panic!("{layout:?}: {e}"))
                .unwrap();
            assert_eq!(starts.len(), layout.len());
        }
    }

    #[test]
    fn layouts_over_the_slice_counts_are_refused_with_the_reason() {
        assert_eq!(
            check_layout(&[inst(4, 4), inst(4, 4)], 7, 8),
            Err(LayoutError::TooManyComputeSlices { used: 8, total: 7 })
        );
        assert_eq!(
            check_layout(&[inst(1, 2); 5], 7, 8),
            Err(LayoutError::TooManyMemorySlices { used: 10, total: 8 })
        );
    }

    #[test]
    fn the_placement_search_backtracks_to_a_fit() {
        // Placed in the given order, 1g@0 and 1g@1 would leave no aligned start for the 2g beside a
        // 3g@4 only if the 2g went first to 0; the search must find 3g@4, 2g@0, 1g@2, 1g@3 or similar.
        let layout = [inst(1, 1), inst(1, 1), inst(2, 2), inst(3, 4)];
        let starts = check_layout(&layout, 7, 8).unwrap().unwrap();
        let mut used = 0u8;
        for (i, s) in layout.iter().zip(&starts) {
            let mask = (((1u16 << i.memory_slices) - 1) << s) as u8;
            assert_eq!(used & mask, 0, "instances overlap: {starts:?}");
            used |= mask;
        }
    }

    #[test]
    fn an_instance_with_no_profile_on_the_7_8_geometry_has_no_placement() {
        // 2 compute slices with 4 memory slices is no profile of NVIDIA's tables.
        assert_eq!(
            check_layout(&[inst(2, 4)], 7, 8),
            Err(LayoutError::NoPlacement)
        );
    }

    #[test]
    fn other_geometries_are_checked_by_counts_alone() {
        assert_eq!(check_layout(&[inst(2, 2), inst(2, 2)], 4, 4), Ok(None));
        assert_eq!(
            check_layout(&[inst(4, 4), inst(1, 1)], 4, 4),
            Err(LayoutError::TooManyComputeSlices { used: 5, total: 4 })
        );
    }
}
