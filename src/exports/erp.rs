//! ERP journal lines: a period's issued invoices as balanced double-entry lines. Each invoice debits
//! its team's cost center and GL account; one line credits the platform's GPU cost center with the
//! total. A layout file renames and reorders columns for a given ERP, without code changes.

use std::collections::BTreeMap;
use std::str::FromStr;

use chrono::NaiveDate;
use rust_decimal::Decimal;
use serde::Deserialize;

use crate::domain::team::TeamId;
use crate::domain::time::Month;

/// The fields a journal line has; a layout picks and names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Field {
    /// Last day of the period, `YYYY-MM-DD`.
    PostingDate,
    /// `YYYY-MM`.
    Period,
    /// The invoice or credit note number; `CLEARING-<period>` on the platform's line.
    Document,
    Line,
    CostCenter,
    GlAccount,
    /// Amount on the debit side (empty on a credit line).
    Debit,
    /// Amount on the credit side (empty on a debit line).
    Credit,
    /// Debit positive, credit negative.
    Amount,
    Currency,
    Description,
    Team,
}

impl FromStr for Field {
    type Err = String;
    fn from_str(s: &str) -> Result<Field, String> {
        serde_json::from_value(serde_json::Value::String(s.to_owned())).map_err(|_| {
            format!(
                "{s:?} is not a journal field: use posting_date, period, document, line, cost_center, \
                 gl_account, debit, credit, amount, currency, description or team"
            )
        })
    }
}

/// One output column: a header and the field under it.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct Column {
    pub header: String,
    pub field: Field,
}

/// Which columns, in which order, under which names.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct Layout {
    #[serde(rename = "column")]
    pub columns: Vec<Column>,
}

impl Default for Layout {
    fn default() -> Self {
        use Field::*;
        let c = |header: &str, field| Column {
            header: header.to_owned(),
            field,
        };
        Layout {
            columns: vec![
                c("posting_date", PostingDate),
                c("period", Period),
                c("document", Document),
                c("line", Line),
                c("cost_center", CostCenter),
                c("gl_account", GlAccount),
                c("debit", Debit),
                c("credit", Credit),
                c("currency", Currency),
                c("description", Description),
            ],
        }
    }
}

impl Layout {
    /// Reads a layout file (TOML: `[[column]] header = "…" field = "…"`).
    pub fn parse(text: &str) -> Result<Layout, String> {
        let layout: Layout = toml::from_str(text).map_err(|e| e.to_string())?;
        if layout.columns.is_empty() {
            return Err("a layout needs at least one [[column]]".into());
        }
        Ok(layout)
    }
}

/// A team's share of a period, from one issued invoice or credit note.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    pub number: String,
    pub team: TeamId,
    pub team_name: String,
    pub cost_center: Option<String>,
    pub gl_account: Option<String>,
    pub currency: String,
    pub total: Decimal,
}

/// Where the platform's credit goes.
#[derive(Debug, Clone)]
pub struct Platform {
    pub cost_center: String,
    pub gl_account: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct JournalLine {
    pub posting_date: NaiveDate,
    pub period: Month,
    pub document: String,
    pub line: usize,
    pub cost_center: String,
    pub gl_account: String,
    /// Debit positive, credit negative.
    pub amount: Decimal,
    pub currency: String,
    pub description: String,
    /// The team it charges; none on the platform's balancing line.
    pub team: Option<TeamId>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum JournalError {
    #[error(
        "team \"{0}\" has no cost center: set it with PUT /v1/teams/{0} before exporting journal lines"
    )]
    NoCostCenter(TeamId),
    #[error(
        "team \"{0}\" has no GL account: set it with PUT /v1/teams/{0} before exporting journal lines"
    )]
    NoGlAccount(TeamId),
    #[error("the invoices of {0} use several currencies; export them one currency at a time")]
    MixedCurrencies(Month),
}

/// The platform's document of `month` in the journal: it books the platform's side of the month's
/// invoices, and FOCUS rows on the platform's account name it as their `InvoiceId` once the month
/// is invoiced.
pub fn clearing_document(month: Month) -> String {
    format!("CLEARING-{month}")
}

/// The journal of a period: a debit (or, for a credit note, a credit) per document on the team's cost
/// center, and one balancing line per currency on the platform's. Every team without a cost center or
/// GL account is an error, none is exported with a blank.
pub fn journal(
    month: Month,
    documents: &[Document],
    platform: &Platform,
) -> Result<Vec<JournalLine>, Vec<JournalError>> {
    let posting_date = month
        .end()
        .date_naive()
        .pred_opt()
        .expect("a month has a last day");
    let mut errors = Vec::new();
    for d in documents {
        if d.cost_center.as_deref().is_none_or(str::is_empty) {
            errors.push(JournalError::NoCostCenter(d.team.clone()));
        } else if d.gl_account.as_deref().is_none_or(str::is_empty) {
            errors.push(JournalError::NoGlAccount(d.team.clone()));
        }
    }
    let currencies: std::collections::BTreeSet<&str> =
        documents.iter().map(|d| d.currency.as_str()).collect();
    if currencies.len() > 1 {
        errors.push(JournalError::MixedCurrencies(month));
    }
    errors.dedup();
    if !errors.is_empty() {
        return Err(errors);
    }
    let mut lines = Vec::new();
    let mut total: BTreeMap<&str, Decimal> = BTreeMap::new();
    for d in documents.iter().filter(|d| !d.total.is_zero()) {
        *total.entry(&d.currency).or_default() += d.total;
        lines.push(JournalLine {
            posting_date,
            period: month,
            document: d.number.clone(),
            line: lines.len() + 1,
            cost_center: d.cost_center.clone().unwrap_or_default(),
            gl_account: d.gl_account.clone().unwrap_or_default(),
            amount: d.total,
            currency: d.currency.clone(),
            description: format!("GPU chargeback {month}: {} ({})", d.team_name, d.number),
            team: Some(d.team.clone()),
        });
    }
    for (currency, sum) in total {
        lines.push(JournalLine {
            posting_date,
            period: month,
            document: clearing_document(month),
            line: lines.len() + 1,
            cost_center: platform.cost_center.clone(),
            gl_account: platform.gl_account.clone(),
            amount: -sum,
            currency: currency.to_owned(),
            description: format!("GPU chargeback {month}: recovered from teams"),
            team: None,
        });
    }
    Ok(lines)
}

/// A journal line as a CSV record under `layout`; text cells are made safe to open in a
/// spreadsheet (cost centers, GL accounts and team names are typed by people), amounts stay numbers.
pub fn record(line: &JournalLine, layout: &Layout) -> Vec<String> {
    let t = |v: &str| crate::domain::text::spreadsheet_safe(v).into_owned();
    let side = |positive: bool| {
        if (line.amount > Decimal::ZERO) == positive && !line.amount.is_zero() {
            line.amount.abs().to_string()
        } else {
            String::new()
        }
    };
    layout
        .columns
        .iter()
        .map(|c| match c.field {
            Field::PostingDate => line.posting_date.to_string(),
            Field::Period => line.period.to_string(),
            Field::Document => t(&line.document),
            Field::Line => line.line.to_string(),
            Field::CostCenter => t(&line.cost_center),
            Field::GlAccount => t(&line.gl_account),
            Field::Debit => side(true),
            Field::Credit => side(false),
            Field::Amount => line.amount.to_string(),
            Field::Currency => line.currency.clone(),
            Field::Description => t(&line.description),
            Field::Team => t(line.team.as_ref().map_or("", TeamId::as_str)),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rust_decimal_macros::dec;

    fn doc(team: &str, total: Decimal, cc: Option<&str>) -> Document {
        Document {
            number: format!("SM-2026-00000{}", team.len()),
            team: TeamId::parse(team).unwrap(),
            team_name: team.to_uppercase(),
            cost_center: cc.map(str::to_owned),
            gl_account: Some("6420".into()),
            currency: "USD".into(),
            total,
        }
    }

    fn platform() -> Platform {
        Platform {
            cost_center: "CC-GPU".into(),
            gl_account: "6490".into(),
        }
    }

    #[test]
    fn the_journal_balances_and_credits_the_platform_once() {
        let month: Month = "2026-09".parse().unwrap();
        let lines = journal(
            month,
            &[
                doc("nlp", dec!(1337.14), Some("CC-1")),
                doc("vision", dec!(385.71), Some("CC-2")),
            ],
            &platform(),
        )
        .unwrap();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines.iter().map(|l| l.amount).sum::<Decimal>(), dec!(0));
        assert_eq!(lines[2].cost_center, "CC-GPU");
        assert_eq!(lines[2].amount, dec!(-1722.85));
        assert_eq!(lines[0].posting_date.to_string(), "2026-09-30");
        let r = record(&lines[2], &Layout::default());
        assert_eq!(r[6], "", "no debit on the credit line");
        assert_eq!(r[7], "1722.85");
    }

    #[test]
    fn teams_without_a_cost_center_are_named_and_nothing_is_exported() {
        let month: Month = "2026-09".parse().unwrap();
        let errors = journal(
            month,
            &[
                doc("nlp", dec!(1), None),
                doc("vision", dec!(1), Some("")),
                doc("search", dec!(1), Some("CC")),
            ],
            &platform(),
        )
        .unwrap_err();
        assert_eq!(
            errors,
            vec![
                JournalError::NoCostCenter(TeamId::parse("nlp").unwrap()),
                JournalError::NoCostCenter(TeamId::parse("vision").unwrap())
            ]
        );
        assert!(
            errors[0]
                .to_string()
                .contains("team \"nlp\" has no cost center")
        );
    }

    #[test]
    fn a_layout_file_renames_and_reorders_columns() {
        let layout = Layout::parse(
            r#"
            [[column]]
            header = "Kostenstelle"
            field = "cost_center"
            [[column]]
            header = "Betrag"
            field = "amount"
            [[column]]
            header = "Beleg"
            field = "document"
            "#,
        )
        .unwrap();
        let lines = journal(
            "2026-09".parse().unwrap(),
            &[doc("nlp", dec!(10.50), Some("CC-1"))],
            &platform(),
        )
        .unwrap();
        assert_eq!(
            record(&lines[0], &layout),
            vec!["CC-1", "10.50", "SM-2026-000003"]
        );
        assert_eq!(
            record(&lines[1], &layout),
            vec!["CC-GPU", "-10.50", "CLEARING-2026-09"]
        );
        assert!(Layout::parse("[[column]]\nheader = \"x\"\nfield = \"colour\"").is_err());
        let example = include_str!("../../deploy/erp-layout.example.toml");
        assert_eq!(
            Layout::parse(example).unwrap().columns[0].field,
            Field::PostingDate
        );
    }
}
