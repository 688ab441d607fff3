//! The finance exports: what leaves slicemeter for finance's tools, each in its format, from the
//! same figures as the reports and invoices. FOCUS cost and usage rows (`focus`: 1.0, 1.2 and 1.3,
//! pure), the ERP journal of a period's issued invoices (`erp`, pure), OpenCost's allocation API
//! (`opencost`, pure), and `service`, which streams them from the database (`chunks`: CSV as a
//! stream of chunks from a writer task).

mod chunks;
pub mod erp;
pub mod focus;
pub mod opencost;
pub mod service;
