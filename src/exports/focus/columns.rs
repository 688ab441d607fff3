//! The columns of each FOCUS version slicemeter writes, and what it declares of FOCUS 1.2's
//! applicability criteria.

/// The FOCUS version an export is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Version {
    /// FOCUS 1.0, kept for tools that read no later one.
    V1_0,
    /// FOCUS 1.2 (ratified 2025), the default.
    #[default]
    V1_2,
    /// FOCUS 1.3 (December 2025): 1.2 and its split cost allocation columns.
    V1_3,
}

impl Version {
    pub fn as_str(self) -> &'static str {
        match self {
            Version::V1_0 => "1.0",
            Version::V1_2 => "1.2",
            Version::V1_3 => "1.3",
        }
    }

    pub fn parse(s: &str) -> Result<Version, String> {
        match s {
            "1.0" => Ok(Version::V1_0),
            "1.2" => Ok(Version::V1_2),
            "1.3" => Ok(Version::V1_3),
            _ => Err(format!("FOCUS version {s:?} is not one of 1.0, 1.2, 1.3")),
        }
    }

    /// The header: the version's FOCUS columns in alphabetical order, then slicemeter's `x_` ones.
    pub fn columns(self) -> Vec<&'static str> {
        let later: &[&str] = match self {
            Version::V1_3 => &[],
            Version::V1_2 => &ADDED_IN_1_3,
            Version::V1_0 => &[ADDED_IN_1_2.as_slice(), ADDED_IN_1_3.as_slice()].concat(),
        };
        COLUMNS
            .iter()
            .copied()
            .filter(|c| !later.contains(c))
            .collect()
    }

    /// Where each of the version's columns is in a [`Row::record`].
    /// Worked out once per version: every row of an export asks.
    pub(super) fn positions(self) -> &'static [usize] {
        static POSITIONS: [std::sync::OnceLock<Vec<usize>>; 3] =
            [const { std::sync::OnceLock::new() }; 3];
        POSITIONS[self as usize].get_or_init(|| {
            self.columns()
                .iter()
                .map(|c| COLUMNS.iter().position(|k| k == c).expect("a known column"))
                .collect()
        })
    }
}

/// Every column a row has: FOCUS 1.3's, in its order, then slicemeter's own `x_` columns.
pub const COLUMNS: [&str; 72] = [
    "AllocatedMethodDetails",
    "AllocatedMethodId",
    "AllocatedResourceId",
    "AllocatedResourceName",
    "AllocatedTags",
    "AvailabilityZone",
    "BilledCost",
    "BillingAccountId",
    "BillingAccountName",
    "BillingAccountType",
    "BillingCurrency",
    "BillingPeriodEnd",
    "BillingPeriodStart",
    "CapacityReservationId",
    "CapacityReservationStatus",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "ChargeFrequency",
    "ChargePeriodEnd",
    "ChargePeriodStart",
    "CommitmentDiscountCategory",
    "CommitmentDiscountId",
    "CommitmentDiscountName",
    "CommitmentDiscountQuantity",
    "CommitmentDiscountStatus",
    "CommitmentDiscountType",
    "CommitmentDiscountUnit",
    "ConsumedQuantity",
    "ConsumedUnit",
    "ContractApplied",
    "ContractedCost",
    "ContractedUnitPrice",
    "EffectiveCost",
    "HostProviderName",
    "InvoiceId",
    "InvoiceIssuerName",
    "ListCost",
    "ListUnitPrice",
    "PricingCategory",
    "PricingCurrency",
    "PricingCurrencyContractedUnitPrice",
    "PricingCurrencyEffectiveCost",
    "PricingCurrencyListUnitPrice",
    "PricingQuantity",
    "PricingUnit",
    "ProviderName",
    "PublisherName",
    "RegionId",
    "RegionName",
    "ResourceId",
    "ResourceName",
    "ResourceType",
    "ServiceCategory",
    "ServiceName",
    "ServiceProviderName",
    "ServiceSubcategory",
    "SkuId",
    "SkuMeter",
    "SkuPriceDetails",
    "SkuPriceId",
    "SubAccountId",
    "SubAccountName",
    "SubAccountType",
    "Tags",
    "x_GpuModel",
    "x_SliceKind",
    "x_MigProfile",
    "x_PhysicalShare",
    "x_IsolationFactor",
    "x_RateCardVersion",
    "x_InvoiceNumber",
];

/// The columns FOCUS 1.3 added to 1.2's: split cost allocation, the contract a charge applies to
/// (`ContractApplied`: null, slicemeter has no contract commitments), and the providers' new names
/// (`ProviderName` and `PublisherName`, deprecated in 1.3, are kept beside them).
const ADDED_IN_1_3: [&str; 8] = [
    "AllocatedMethodDetails",
    "AllocatedMethodId",
    "AllocatedResourceId",
    "AllocatedResourceName",
    "AllocatedTags",
    "ContractApplied",
    "HostProviderName",
    "ServiceProviderName",
];

/// The columns FOCUS 1.1 and 1.2 added to 1.0's.
const ADDED_IN_1_2: [&str; 14] = [
    "BillingAccountType",
    "CapacityReservationId",
    "CapacityReservationStatus",
    "CommitmentDiscountQuantity",
    "CommitmentDiscountUnit",
    "InvoiceId",
    "PricingCurrency",
    "PricingCurrencyContractedUnitPrice",
    "PricingCurrencyEffectiveCost",
    "PricingCurrencyListUnitPrice",
    "ServiceSubcategory",
    "SkuMeter",
    "SkuPriceDetails",
    "SubAccountType",
];

/// The FOCUS 1.2 applicability criteria the export meets, to declare to a validator
/// (`SLICEMETER_FOCUS12_CRITERIA`). Not declared, because slicemeter has none of them: availability
/// zones, regions, capacity reservations, commitment discounts, more than one pricing category or
/// billing account type, a pricing currency other than the billing one, virtual currencies.
pub const FOCUS12_CRITERIA: [&str; 10] = [
    "ACCOUNT_NAMING_SUPPORTED",
    "SUB_ACCOUNT_SUPPORTED",
    // Teams, and the platform's own account.
    "MULTIPLE_SUB_ACCOUNT_TYPES_SUPPORTED",
    "USAGE_MEASUREMENT_SUPPORTED",
    "UNIT_PRICING_SUPPORTED",
    // The isolation factor: a slice's contracted price is its list price times the factor.
    "NEGOTIATED_PRICING_SUPPORTED",
    // The rate card, which every team can read.
    "PUBLIC_PRICE_LIST_SUPPORTED",
    "TAGGING_SUPPORTED",
    "RESOURCE_TYPE_ASSIGNMENT_SUPPORTED",
    "BILLING_BASED_ON_PROVISIONED_RESOURCES_SUPPORTED",
];

/// The FOCUS 1.3 applicability criteria the export meets (`SLICEMETER_FOCUS13_CRITERIA`): 1.2's,
/// and split cost allocation (the `Allocated*` columns). Not declared: contract commitments, and
/// what 1.2's list leaves out.
pub const FOCUS13_CRITERIA: [&str; 11] = [
    "ACCOUNT_NAMING_SUPPORTED",
    "SUB_ACCOUNT_SUPPORTED",
    "MULTIPLE_SUB_ACCOUNT_TYPES_SUPPORTED",
    "USAGE_MEASUREMENT_SUPPORTED",
    "UNIT_PRICING_SUPPORTED",
    "NEGOTIATED_PRICING_SUPPORTED",
    "PUBLIC_PRICE_LIST_SUPPORTED",
    "TAGGING_SUPPORTED",
    "RESOURCE_TYPE_ASSIGNMENT_SUPPORTED",
    "BILLING_BASED_ON_PROVISIONED_RESOURCES_SUPPORTED",
    "DATA_GENERATOR_SPLIT_COST_ALLOCATION_SUPPORTED",
];

/// `PricingUnit` in FOCUS's UnitFormat (`<unit>-<plural time unit>`): one GPU-equivalent hour is an
/// hour of a whole GPU's blocked capacity.
pub const PRICING_UNIT: &str = "GPU-Hours";

/// `PricingUnit` of a row priced whole, one to a row: a team's share of a month's idle capacity
/// spread over several GPU models has no one hourly price.
pub const SHARE_UNIT: &str = "Shares";

/// `PricingUnit` of the rounding residual: the currency's minor unit (a cent), at one minor unit.
pub const MINOR_UNIT: &str = "Minor Units";
