//! The audit log: rate-card versions, invoice runs, issues and credit notes, team changes, GPU moves
//! tokens, budgets and unit definitions, each recorded by the feature that makes the change, in the same transaction.

pub mod store;

/// What an audit entry records; stored as its dotted name (`invoice.issue`), which the table's check
/// constraint lists too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditAction {
    RateCardPublish,
    RateCardWithdraw,
    InvoiceRun,
    InvoiceIssue,
    InvoiceCredit,
    TeamPut,
    TokenCreate,
    TokenRevoke,
    GpuMove,
    BudgetCreate,
    BudgetUpdate,
    BudgetDelete,
    UnitPut,
    UnitDelete,
}

impl AuditAction {
    /// Every action, in the order the API lists them.
    pub const ALL: [AuditAction; 14] = [
        AuditAction::RateCardPublish,
        AuditAction::RateCardWithdraw,
        AuditAction::GpuMove,
        AuditAction::InvoiceRun,
        AuditAction::InvoiceIssue,
        AuditAction::InvoiceCredit,
        AuditAction::TeamPut,
        AuditAction::TokenCreate,
        AuditAction::TokenRevoke,
        AuditAction::BudgetCreate,
        AuditAction::BudgetUpdate,
        AuditAction::BudgetDelete,
        AuditAction::UnitPut,
        AuditAction::UnitDelete,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AuditAction::RateCardPublish => "rate_card.publish",
            AuditAction::RateCardWithdraw => "rate_card.withdraw",
            AuditAction::InvoiceRun => "invoice.run",
            AuditAction::InvoiceIssue => "invoice.issue",
            AuditAction::InvoiceCredit => "invoice.credit",
            AuditAction::TeamPut => "team.put",
            AuditAction::TokenCreate => "token.create",
            AuditAction::TokenRevoke => "token.revoke",
            AuditAction::GpuMove => "gpu.move",
            AuditAction::BudgetCreate => "budget.create",
            AuditAction::BudgetUpdate => "budget.update",
            AuditAction::BudgetDelete => "budget.delete",
            AuditAction::UnitPut => "unit.put",
            AuditAction::UnitDelete => "unit.delete",
        }
    }
}

impl std::str::FromStr for AuditAction {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        AuditAction::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or(())
    }
}
