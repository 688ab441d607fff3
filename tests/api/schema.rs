//! The schema keeps the rules a Citus cluster needs (issue 12, item 7), checked from the catalog of a
//! migrated database against the `create_reference_table` / `create_distributed_table` commands the
//! manual gives (docs/operations.md), so that neither can drift from the other. Citus itself is not packaged here.

use crate::support::{apply_migrations, empty_pool, fresh_pool};
use sqlx::PgPool;
use std::collections::{BTreeMap, BTreeSet};

/// How docs/operations.md spreads one table over a cluster.
#[derive(Debug, Clone, PartialEq)]
enum Placement {
    Reference,
    Distributed {
        column: String,
        colocate_with: Option<String>,
    },
}

/// The tables docs/operations.md's commands name, in their order.
fn readme_commands() -> Vec<(String, Placement)> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
            .expect("docs/operations.md");
    let section = readme
        .split("\n## Past one PostgreSQL (Citus)\n")
        .nth(1)
        .expect("docs/operations.md has a section \"Past one PostgreSQL (Citus)\"");
    let block = section
        .split("```sql\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("the section gives its commands in a sql block");
    let quoted = |s: &str| -> Vec<String> {
        s.split('\'')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect()
    };
    let mut commands = Vec::new();
    for line in block.lines().map(str::trim) {
        if line.is_empty() || line.starts_with("--") {
            continue;
        }
        let args = quoted(line);
        let placement = if line.starts_with("select create_reference_table(") {
            assert_eq!(args.len(), 1, "{line}");
            Placement::Reference
        } else if line.starts_with("select create_distributed_table(") {
            assert!(args.len() == 2 || args.len() == 3, "{line}");
            Placement::Distributed {
                column: args[1].clone(),
                colocate_with: args.get(2).filter(|c| *c != "none").cloned(),
            }
        } else {
            panic!("not a command this test knows: {line}");
        };
        commands.push((args[0].clone(), placement));
    }
    commands
}

/// Every rule of the commands that the schema in `pool` breaks, one line each.
async fn violations(pool: &PgPool, commands: &[(String, Placement)]) -> Vec<String> {
    let mut found = Vec::new();
    let tables: BTreeMap<String, String> = sqlx::query_as(
        "select c.relname::text, c.relkind::text from pg_class c
         where c.relnamespace = current_schema()::regnamespace and c.relkind in ('r', 'p')
           and not c.relispartition and c.relname <> '_sqlx_migrations'",
    )
    .fetch_all(pool)
    .await
    .unwrap()
    .into_iter()
    .collect();
    let mut named: BTreeMap<&str, &Placement> = BTreeMap::new();
    for (table, placement) in commands {
        if named.insert(table, placement).is_some() {
            found.push(format!("{table} is named twice"));
        }
        if !tables.contains_key(table) {
            found.push(format!("{table} is not a table of the schema"));
        }
    }
    for table in tables.keys() {
        if !named.contains_key(table.as_str()) {
            found.push(format!(
                "{table} is neither a reference nor a distributed table"
            ));
        }
    }
    for (table, placement) in commands {
        let Some(kind) = tables.get(table) else {
            continue;
        };
        match placement {
            Placement::Reference if kind == "p" => {
                found.push(format!("{table} is a reference table and partitioned"))
            }
            Placement::Reference => {}
            Placement::Distributed {
                column,
                colocate_with,
            } => {
                found.extend(distributed_violations(pool, table, column).await);
                if let Some(anchor) = colocate_with {
                    let ok = matches!(
                        named.get(anchor.as_str()),
                        Some(Placement::Distributed { column: c, colocate_with: None })
                            if column_type(pool, anchor, c).await == column_type(pool, table, column).await
                    );
                    if !ok {
                        found.push(format!(
                            "{table} is co-located with {anchor}, which is not distributed first by a column of the same type"
                        ));
                    }
                }
            }
        }
    }
    found.extend(foreign_key_violations(pool, commands).await);
    found
}

async fn column_type(pool: &PgPool, table: &str, column: &str) -> Option<(String, bool)> {
    sqlx::query_as(
        "select format_type(a.atttypid, a.atttypmod), a.attnotnull from pg_attribute a
         where a.attrelid = to_regclass($1) and a.attname = $2 and not a.attisdropped",
    )
    .bind(table)
    .bind(column)
    .fetch_optional(pool)
    .await
    .unwrap()
}

/// A distributed table's column is there and not null; its partitions are one level deep; every
/// unique, primary-key or exclusion index, on it or on any partition, includes the column.
async fn distributed_violations(pool: &PgPool, table: &str, column: &str) -> Vec<String> {
    let mut found = Vec::new();
    match column_type(pool, table, column).await {
        None => found.push(format!("{table} has no column {column}")),
        Some((_, false)) => found.push(format!("{table}.{column} may be null")),
        Some(_) => {}
    }
    let nested: Vec<String> = sqlx::query_scalar(
        "select relid::text from pg_partition_tree(to_regclass($1))
         where level = 1 and not isleaf order by 1",
    )
    .bind(table)
    .fetch_all(pool)
    .await
    .unwrap();
    for p in nested {
        found.push(format!(
            "{p}, a partition of {table}, is partitioned itself"
        ));
    }
    let keys: Vec<(String, String)> = sqlx::query_as(
        "select i.indexrelid::regclass::text, i.indrelid::regclass::text
         from pg_partition_tree(to_regclass($1)) t
         join pg_index i on i.indrelid = t.relid
         where (i.indisunique or i.indisexclusion)
           and not exists (select from pg_attribute a
                           where a.attrelid = i.indrelid and a.attname = $2
                             and a.attnum = any(i.indkey))
         order by 1",
    )
    .bind(table)
    .bind(column)
    .fetch_all(pool)
    .await
    .unwrap();
    for (index, on) in keys {
        found.push(format!(
            "{index}, a unique key of {on}, does not include {column}"
        ));
    }
    found
}

/// No foreign key runs from a reference table to a distributed one, or between distributed
/// tables; a reference table comes after every table its foreign keys point to.
async fn foreign_key_violations(pool: &PgPool, commands: &[(String, Placement)]) -> Vec<String> {
    let keys: Vec<(String, String, String)> = sqlx::query_as(
        "select conname::text, conrelid::regclass::text, confrelid::regclass::text
         from pg_constraint
         where contype = 'f' and connamespace = current_schema()::regnamespace
           and conparentid = 0
         order by 1",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let position: BTreeMap<&str, (usize, &Placement)> = commands
        .iter()
        .enumerate()
        .map(|(i, (t, p))| (t.as_str(), (i, p)))
        .collect();
    let mut found = Vec::new();
    for (name, from, to) in keys {
        let (Some(&(i, from_placement)), Some(&(j, to_placement))) =
            (position.get(from.as_str()), position.get(to.as_str()))
        else {
            continue;
        };
        match (from_placement, to_placement) {
            (_, Placement::Distributed { .. }) => found.push(format!(
                "{name} runs from {from} to {to}, a distributed table"
            )),
            (Placement::Reference, Placement::Reference) if j > i && from != to => found.push(
                format!("{name}: {from} is made a reference table before {to}, which it points to"),
            ),
            _ => {}
        }
    }
    found
}

/// Makes a month's partitions of every partitioned table, so that their keys are checked too.
async fn make_partitions(pool: &PgPool) {
    for table in slicemeter::db::PARTITIONED {
        sqlx::query("select ensure_month_partition($1, '2026-10-01')")
            .bind(table)
            .execute(pool)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn the_schema_keeps_the_rules_of_the_readmes_citus_commands() {
    let commands = readme_commands();
    let distributed: BTreeSet<&str> = commands
        .iter()
        .filter(|(_, p)| matches!(p, Placement::Distributed { .. }))
        .map(|(t, _)| t.as_str())
        .collect();
    assert_eq!(
        distributed,
        BTreeSet::from([
            "book_gpu",
            "book_slice",
            "evidence_day",
            "evidence_window",
            "gpu_daily",
            "gpu_hourly",
            "gpu_presence",
            "occupancy",
            "usage_daily",
            "usage_hourly",
            "usage_month",
            "usage_month_days",
            "usage_month_gpu",
            "usage_month_slice",
            "usage_team_daily"
        ])
    );
    for table in [
        "team",
        "rate_card",
        "rate_card_price",
        "invoice",
        "invoice_line",
    ] {
        assert!(
            commands
                .iter()
                .any(|(t, p)| t == table && *p == Placement::Reference),
            "{table} is a reference table"
        );
    }
    let (pool, _) = fresh_pool().await;
    make_partitions(&pool).await;
    let partitions: i64 =
        sqlx::query_scalar("select count(*) from pg_partition_tree('occupancy') where level = 1")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(partitions, 31, "October's days hang from occupancy itself");
    assert_eq!(violations(&pool, &commands).await, Vec::<String>::new());
}

#[tokio::test]
async fn the_check_finds_what_the_schema_broke_before_it_was_made_ready() {
    let pool = empty_pool().await;
    apply_migrations(&pool, 1..=18).await;
    make_partitions(&pool).await;
    let found = violations(&pool, &readme_commands()).await;
    for expected in [
        "occupancy has no column gpu_id",
        "usage_hourly has no column gpu_id",
        "usage_daily has no column gpu_id",
        "occupancy_y2026m10, a partition of occupancy, is partitioned itself",
        "occupancy_pkey, a unique key of occupancy, does not include gpu_id",
        "occupancy_y2026m10d31_pkey, a unique key of occupancy_y2026m10d31, does not include gpu_id",
        "usage_hourly_pkey, a unique key of usage_hourly, does not include gpu_id",
        "usage_daily_y2026m10_pkey, a unique key of usage_daily_y2026m10, does not include gpu_id",
    ] {
        assert!(
            found.iter().any(|f| f == expected),
            "{expected} not among {found:#?}"
        );
    }
    // 0020 replaced the books' slice-days and sums with `book_slice`, 0022 added the team's day
    // rollup and 0023 replaced `team_namespace` with `namespace_owner`: the commands name the
    // tables of now, which the older schema does not have, and not those it had.
    for expected in [
        "book_slice is not a table of the schema",
        "usage_month_days is not a table of the schema",
        "usage_team_daily is not a table of the schema",
        "namespace_owner is not a table of the schema",
        "book_slice_day is neither a reference nor a distributed table",
        "book_slice_sums is neither a reference nor a distributed table",
        "team_namespace is neither a reference nor a distributed table",
    ] {
        assert!(
            found.iter().any(|f| f == expected),
            "{expected} not among {found:#?}"
        );
    }
    // Only what 0019, 0020, 0022 and 0023 changed, and the tables added since (0026's
    // `unit_definition`, 0029's `evidence_day` and its state tables, 0030's `book_gpu`, 0031's
    // `evidence_window` and 0032's `usage_month`, each with its state table, 0033's
    // `usage_month_slice`, 0034's builds, 0036's `book_team` and 0037's unit counts): the other
    // distributed tables were keyed by the GPU already.
    for f in &found {
        assert!(
            [
                "occupancy",
                "usage_hourly",
                "usage_daily",
                "book_slice",
                "usage_month_days",
                "usage_team_daily",
                "namespace_owner",
                "team_namespace",
                "unit_definition",
                "book_gpu",
                "book_team",
                "evidence_day",
                "evidence_window",
                "usage_month",
                "unit_count",
                "unit_hour_count",
            ]
            .iter()
            .any(|t| f.starts_with(t)),
            "{f}"
        );
    }
}

/// Every SQL function of a migrated database, by name, with PostgreSQL's rendering of its
/// definition.
async fn function_definitions(pool: &PgPool) -> BTreeMap<String, String> {
    sqlx::query_as::<_, (String, String)>(
        "select p.proname::text, pg_get_functiondef(p.oid) from pg_proc p \
         join pg_namespace n on n.oid = p.pronamespace where n.nspname = current_schema()",
    )
    .fetch_all(pool)
    .await
    .unwrap()
    .into_iter()
    .collect()
}

#[tokio::test]
async fn every_sql_function_has_one_file_that_holds_its_definition() {
    let (pool, _) = fresh_pool().await;
    let in_database = function_definitions(&pool).await;
    let files: BTreeSet<&str> = slicemeter::db::FUNCTIONS.iter().map(|(n, _)| *n).collect();
    let functions: BTreeSet<&str> = in_database.keys().map(String::as_str).collect();
    assert_eq!(
        files, functions,
        "each function the migrations leave needs its file in src/db/functions/ (and no file a function the database lacks)"
    );
    for (name, sql) in slicemeter::db::FUNCTIONS {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/db/functions/");
        let on_disk = std::fs::read_to_string(format!("{dir}{name}.sql")).unwrap();
        assert_eq!(on_disk, sql, "{name}.sql is what the build embeds");
        let defines: Vec<&str> = sql
            .match_indices("create or replace function ")
            .map(|(at, m)| sql[at + m.len()..].split('(').next().unwrap().trim())
            .collect();
        assert_eq!(
            defines,
            [name],
            "{name}.sql defines {name} and nothing else"
        );
    }
}

#[tokio::test]
async fn migrate_brings_a_database_whose_function_is_older_to_the_file_s_definition() {
    let (pool, _) = fresh_pool().await;
    let current = function_definitions(&pool).await;
    // An older release's body for one function, as a database upgraded from it would hold.
    sqlx::raw_sql(
        "create or replace function workload_of(pod text, labels jsonb, job_id text, unix_user text) \
         returns text[] language sql immutable as $$ select array['old'] $$",
    )
    .execute(&pool)
    .await
    .unwrap();
    let old: (String,) =
        sqlx::query_as("select workload_of('web-7d9f-x1', '{}'::jsonb, null, null)::text")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(old.0, "{old}");
    slicemeter::db::migrate(&pool).await.unwrap();
    assert_eq!(function_definitions(&pool).await, current);
    let now: (String,) =
        sqlx::query_as("select workload_of('web-7d9f-x1', '{}'::jsonb, null, null)::text")
            .fetch_one(&pool)
            .await
            .unwrap();
    // A pod without owner labels is its own workload.
    assert_eq!(now.0, "{Pod,web-7d9f-x1}");
}
