//! Rebuilds when a migration is added or changed: `sqlx::migrate!` embeds `migrations/` at compile
//! time, and cargo does not know to look there on its own (a new migration would otherwise be left
//! out of the binary until some Rust file changed).
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
