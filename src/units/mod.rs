//! Cost per unit of work (DESIGN.md, "Cost per unit of work"): an admin defines a unit (a PromQL
//! counter an inference server exports, the label naming the model, the labels that join a series
//! to a workload); the unit cost of a period is the exact cost of the slices that served the units,
//! from the same books as invoices (the usage report's pricing), over the units counted in the same
//! hours. `promql` checks an expression before it is stored, `count` turns raw counter samples into
//! each hour's increase (a reset counted once, never negative), `hourly` reads them server-side an
//! hour a point to the same figures, `counts` counts each settled hour once and keeps it in
//! PostgreSQL, `cost` joins costs and units, `store` holds the SQL, `service` reads Prometheus and
//! the books, and `kept` keeps the month so far for `/metrics` and the team page.

pub mod cost;
pub mod count;
pub mod counts;
pub mod hourly;
pub mod kept;
pub mod promql;
pub mod service;
pub mod store;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::domain::fields::FieldError;

/// The longest label name a definition names.
const MAX_LABEL: usize = 128;
/// The default divisor: a cost per million units (tokens).
pub const PER_MILLION: i64 = 1_000_000;

/// A unit of work as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UnitDefinition {
    /// `generated_tokens`: lower case, digits and `_`, up to 63 characters.
    #[schema(example = "generated_tokens")]
    pub name: String,
    /// A PromQL expression whose series are counters (a selector, or an expression of counters).
    #[schema(example = "vllm:generation_tokens_total")]
    pub expression: String,
    /// The label naming the model; null where the server names none (TGI): the model is unknown.
    #[schema(example = "model_name")]
    pub model_label: Option<String>,
    /// The label holding the series' Kubernetes namespace.
    #[schema(example = "namespace")]
    pub namespace_label: String,
    /// The label holding the pod; null when the series is joined by `workload_label`.
    #[schema(example = "pod")]
    pub pod_label: Option<String>,
    /// The label holding the workload (the pod's Deployment, StatefulSet or Job); null when the
    /// series is joined by `pod_label`.
    pub workload_label: Option<String>,
    /// The unit cost is given per this many units (1000000: per million tokens; 1: per inference).
    #[schema(example = 1000000)]
    pub per_units: i64,
    pub description: Option<String>,
}

impl UnitDefinition {
    /// Whether `other` counts the same units: the same expression and labels (its `per_units` and
    /// description aside). Kept counts outlive a change of the rest, not of these.
    pub fn counts_like(&self, other: &UnitDefinition) -> bool {
        self.expression == other.expression
            && self.model_label == other.model_label
            && self.namespace_label == other.namespace_label
            && self.pod_label == other.pod_label
            && self.workload_label == other.workload_label
    }
}

/// A stored definition and when it last changed.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct UnitDefinitionView {
    #[serde(flatten)]
    pub definition: UnitDefinition,
    pub updated_at: DateTime<Utc>,
}

/// A definition as sent (`PUT /v1/unit-definitions/{name}`), before it is checked.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UnitDefinitionInput {
    /// Required: a PromQL counter expression, at most 2000 characters, no range or subquery over
    /// 31 days.
    #[schema(example = "vllm:generation_tokens_total")]
    pub expression: Option<String>,
    /// The label naming the model (`model_name` for vLLM and SGLang, `model` for Triton).
    #[schema(example = "model_name")]
    pub model_label: Option<String>,
    /// Default `namespace`.
    pub namespace_label: Option<String>,
    /// Default `pod`, unless `workload_label` is given.
    pub pod_label: Option<String>,
    /// Joins by the workload's name instead of the pod's.
    pub workload_label: Option<String>,
    /// Default 1000000 (per million units); 1 to 1000000000.
    #[schema(minimum = 1, maximum = 1_000_000_000)]
    pub per_units: Option<i64>,
    /// Up to 500 characters.
    pub description: Option<String>,
}

/// Whether `name` may name a unit.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = (1..=63).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a unit name: a lower-case letter, then lower-case letters, digits or _, up to 63 characters (e.g. generated_tokens)"
        ))
    }
}

fn check_label(field: &str, value: &str, errors: &mut Vec<FieldError>) {
    let ok = (1..=MAX_LABEL).contains(&value.len())
        && value.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && value.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !ok {
        errors.push(FieldError::new(
            field,
            format!("{value:?} is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*, up to {MAX_LABEL} characters)"),
        ));
    }
}

impl UnitDefinitionInput {
    /// The definition named `name`, or every bad field.
    pub fn validate(self, name: &str) -> Result<UnitDefinition, Vec<FieldError>> {
        let mut errors = Vec::new();
        if let Err(e) = check_name(name) {
            errors.push(FieldError::new("name", e));
        }
        match &self.expression {
            None => errors.push(FieldError::new(
                "expression",
                "expression is required, e.g. vllm:generation_tokens_total",
            )),
            Some(e) => {
                let problems = promql::problems(e);
                if !problems.is_empty() {
                    errors.push(FieldError::new("expression", problems.join("; ")));
                }
            }
        }
        if let Some(l) = &self.model_label {
            check_label("model_label", l, &mut errors);
        }
        let namespace_label = self
            .namespace_label
            .clone()
            .unwrap_or_else(|| "namespace".into());
        check_label("namespace_label", &namespace_label, &mut errors);
        let (pod_label, workload_label) = match (self.pod_label, self.workload_label) {
            (Some(_), Some(_)) => {
                errors.push(FieldError::new(
                    "workload_label",
                    "give pod_label or workload_label, not both: a series joins a workload by one",
                ));
                (None, None)
            }
            (None, None) => (Some("pod".to_owned()), None),
            (pod, workload) => (pod, workload),
        };
        if let Some(l) = &pod_label {
            check_label("pod_label", l, &mut errors);
        }
        if let Some(l) = &workload_label {
            check_label("workload_label", l, &mut errors);
        }
        let per_units = self.per_units.unwrap_or(PER_MILLION);
        if !(1..=1_000_000_000).contains(&per_units) {
            errors.push(FieldError::new(
                "per_units",
                format!("{per_units} is not 1 to 1000000000"),
            ));
        }
        if let Some(d) = &self.description
            && d.chars().count() > 500
        {
            errors.push(FieldError::new(
                "description",
                "the description is longer than 500 characters",
            ));
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(UnitDefinition {
            name: name.to_owned(),
            expression: self.expression.unwrap_or_default().trim().to_owned(),
            model_label: self.model_label,
            namespace_label,
            pod_label,
            workload_label,
            per_units,
            description: self.description,
        })
    }
}

/// Unit definitions from a TOML file (`slicemeter unit apply`, deploy/units.example.toml): a table
/// per unit, named as the unit, holding the fields of `PUT /v1/unit-definitions/{name}`, checked
/// as the API checks them. Every bad field of every unit is named, and none is returned unless
/// all pass: a file is stored whole or not at all.
pub fn from_toml(text: &str) -> Result<Vec<UnitDefinition>, String> {
    let inputs: std::collections::BTreeMap<String, UnitDefinitionInput> =
        toml::from_str(text).map_err(|e| e.to_string())?;
    if inputs.is_empty() {
        return Err(
            "the file defines no unit: add a table such as [generated_tokens] with an expression"
                .into(),
        );
    }
    let mut defs = Vec::with_capacity(inputs.len());
    let mut problems = Vec::new();
    for (name, input) in inputs {
        match input.validate(&name) {
            Ok(def) => defs.push(def),
            Err(fields) => problems.extend(
                fields
                    .into_iter()
                    .map(|f| format!("[{name}] {}: {}", f.field, f.message)),
            ),
        }
    }
    if problems.is_empty() {
        Ok(defs)
    } else {
        Err(problems.join("; "))
    }
}

/// Ready-made definitions for the inference servers' own counters, as Prometheus' Kubernetes
/// service discovery labels their series (`namespace`, `pod`); docs/unit-cost.md shows them.
pub fn presets() -> Vec<UnitDefinition> {
    let def = |name: &str, expr: &str, model: Option<&str>, per: i64, what: &str| UnitDefinition {
        name: name.into(),
        expression: expr.into(),
        model_label: model.map(str::to_owned),
        namespace_label: "namespace".into(),
        pod_label: Some("pod".into()),
        workload_label: None,
        per_units: per,
        description: Some(what.into()),
    };
    vec![
        def(
            "generated_tokens",
            "vllm:generation_tokens_total",
            Some("model_name"),
            PER_MILLION,
            "vLLM: tokens generated",
        ),
        def(
            "prompt_tokens",
            "vllm:prompt_tokens_total",
            Some("model_name"),
            PER_MILLION,
            "vLLM: prompt (prefill) tokens processed",
        ),
        def(
            "tgi_generated_tokens",
            "tgi_request_generated_tokens_sum",
            None,
            PER_MILLION,
            "Hugging Face TGI: tokens generated (the sum of its per-request histogram); TGI labels no model",
        ),
        def(
            "triton_inferences",
            "nv_inference_count",
            Some("model"),
            1000,
            "NVIDIA Triton: inferences (per thousand)",
        ),
        def(
            "sglang_generated_tokens",
            "sglang:generation_tokens_total",
            Some("model_name"),
            PER_MILLION,
            "SGLang: tokens generated",
        ),
        def(
            "sglang_prompt_tokens",
            "sglang:prompt_tokens_total",
            Some("model_name"),
            PER_MILLION,
            "SGLang: prompt tokens processed",
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_passes_its_own_checks() {
        for p in presets() {
            let input = UnitDefinitionInput {
                expression: Some(p.expression.clone()),
                model_label: p.model_label.clone(),
                namespace_label: Some(p.namespace_label.clone()),
                pod_label: p.pod_label.clone(),
                workload_label: p.workload_label.clone(),
                per_units: Some(p.per_units),
                description: p.description.clone(),
            };
            assert_eq!(input.validate(&p.name), Ok(p.clone()));
        }
    }

    #[test]
    fn the_example_file_holds_exactly_the_ready_made_definitions() {
        let text = include_str!("../../deploy/units.example.toml");
        let mut presets = presets();
        presets.sort_by(|a, b| a.name.cmp(&b.name));
        assert_eq!(from_toml(text), Ok(presets));
    }

    #[test]
    fn a_file_with_a_bad_unit_names_each_of_its_bad_fields_and_gives_nothing() {
        let text = r#"
            [generated_tokens]
            expression = "vllm:generation_tokens_total"

            [bad]
            expression = "rate(x[40d])"
            per_units = 0
        "#;
        assert_eq!(
            from_toml(text),
            Err(
                "[bad] expression: a range or subquery reaches over 31 days; at most [31d]; \
                 [bad] per_units: 0 is not 1 to 1000000000"
                    .into()
            )
        );
        assert!(from_toml("[tokens]\nexpresion = \"x\"\n").is_err());
        assert!(from_toml("").is_err());
    }

    #[test]
    fn every_bad_field_is_named() {
        let input = UnitDefinitionInput {
            expression: Some("rate(x[40d])".into()),
            model_label: Some("model-name".into()),
            pod_label: Some("pod".into()),
            workload_label: Some("app".into()),
            per_units: Some(0),
            ..Default::default()
        };
        let fields: Vec<String> = input
            .validate("Bad Name")
            .unwrap_err()
            .into_iter()
            .map(|f| f.field)
            .collect();
        assert_eq!(
            fields,
            [
                "name",
                "expression",
                "model_label",
                "workload_label",
                "per_units"
            ]
        );
    }
}
