//! Billing: rate cards, pricing by physical share, the monthly statement of every unit of fleet cost,
//! and invoices. `pricing`, `period`, `rate_card` and `invoice` are the pure model; `store` and the
//! stores of `rate_card` and `invoice` hold the SQL; `service` owns the transactions and locks.

pub mod invoice;
pub mod period;
pub mod pricing;
#[cfg(test)]
mod props;
pub mod rate_card;
pub mod service;
pub mod store;
