//! `slicemeter demo` as a user runs it: no DATABASE_URL, a private PostgreSQL of its own, a back-fill,
//! the API served, and everything stopped on Ctrl-C. Run twice on the same folder, it reuses it; a
//! second demo beside the first refuses the folder.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use chrono::Datelike;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

struct Demo {
    child: Child,
    base: String,
    token: String,
}

/// A demo whose test fails before `stop` is killed with it, not left running (holding the test
/// run's output open) on a PostgreSQL stopped under it.
impl Drop for Demo {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

fn start(dir: &std::path::Path) -> Demo {
    let mut child = Command::new(env!("CARGO_BIN_EXE_slicemeter"))
        .args([
            "demo",
            // The default fleet: what the README's quick start shows.
            "--gpus",
            "16",
            "--days",
            "32",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(dir)
        .env_remove("DATABASE_URL")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the slicemeter binary runs");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let (mut base, mut token) = (None, None);
    while base.is_none() || token.is_none() {
        let line = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("demo prints its URL and token within two minutes");
        if let Some(url) = line.strip_prefix("slicemeter demo is serving at ") {
            base = Some(url.trim_end_matches('/').to_owned());
        }
        if let Some(rest) = line.strip_prefix("admin token (id ") {
            token = Some(rest.rsplit(' ').next().unwrap().to_owned());
        }
    }
    Demo {
        child,
        base: base.unwrap(),
        token: token.unwrap(),
    }
}

fn stop(mut demo: Demo) {
    kill(Pid::from_raw(demo.child.id() as i32), Signal::SIGINT).unwrap();
    for _ in 0..600 {
        if let Some(status) = demo.child.try_wait().unwrap() {
            assert!(status.success(), "demo exited with {status}");
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    demo.child.kill().ok();
    panic!("demo did not stop within 60 s of Ctrl-C");
}

#[tokio::test(flavor = "multi_thread")]
// long: one demo process from its start to Ctrl-C, checked at each stage
async fn demo_runs_its_own_postgresql_serves_the_api_and_stops_it_on_ctrl_c() {
    let dir = tempfile::tempdir().unwrap();
    // As root the cluster belongs to an unprivileged user, who must reach it through this folder.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let pg = dir.path().join("pg");
    let client = reqwest::Client::new();

    let demo = start(&pg);
    let health = client
        .get(format!("{}/healthz", demo.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    assert_eq!(health.text().await.unwrap(), "ok\n");
    // A second demo on the folder refuses before it touches the database, naming the folder; the
    // first goes on serving from its database (every request below).
    let mut second = Command::new(env!("CARGO_BIN_EXE_slicemeter"))
        .args(["demo", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&pg)
        .env_remove("DATABASE_URL")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut waited = 0;
    let status = loop {
        if let Some(status) = second.try_wait().unwrap() {
            break status;
        }
        if waited == 600 {
            second.kill().ok();
            second.wait().ok();
            panic!("a second demo on the folder did not refuse within 60 s");
        }
        std::thread::sleep(Duration::from_millis(100));
        waited += 1;
    };
    assert!(!status.success(), "{status}");
    let mut said = String::new();
    std::io::Read::read_to_string(&mut second.stderr.take().unwrap(), &mut said).unwrap();
    assert!(
        said.contains(&format!(
            "another slicemeter demo is running in {}: stop it first",
            pg.display()
        )),
        "{said}"
    );
    assert!(!said.contains("Starting a private PostgreSQL"), "{said}");
    // The database URL and the admin token are in the data folder, for this user only, and the CLI
    // reaches the demo with them.
    let file = |name: &str| {
        let path = pg.join(name);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{} is mode {mode:o}", path.display());
        std::fs::read_to_string(&path).unwrap().trim().to_owned()
    };
    assert_eq!(file("admin-token"), demo.token);
    let listed = Command::new(env!("CARGO_BIN_EXE_slicemeter"))
        .args(["token", "list", "--database-url", &file("database-url")])
        .output()
        .unwrap();
    assert!(listed.status.success(), "{listed:?}");
    let listed = String::from_utf8_lossy(&listed.stdout);
    let admin_id = demo.token.split('_').nth(1).unwrap();
    assert!(
        listed
            .lines()
            .any(|l| l.split_whitespace().next() == Some(admin_id) && l.contains("admin")),
        "{listed}"
    );
    let today = chrono::Utc::now().date_naive();
    let report: serde_json::Value = client
        .get(format!(
            "{}/v1/reports/usage?from={}&to={}&group_by=team&step=day",
            demo.base,
            today - chrono::Duration::days(2),
            today + chrono::Duration::days(1)
        ))
        .bearer_auth(&demo.token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let teams = report["totals"].as_array().expect("a report");
    assert!(
        teams.len() >= 6,
        "the back-filled day shows the simulated teams: {report}"
    );
    // The unit cost shows from the first minute: the simulated vLLM counters of the demo's chat
    // pods over yesterday, over what their slices cost.
    let unit_cost: serde_json::Value = client
        .get(format!(
            "{}/v1/reports/unit-cost?from={}&to={today}&unit=generated_tokens&group_by=team,model",
            demo.base,
            today - chrono::Duration::days(1),
        ))
        .bearer_auth(&demo.token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let rows = unit_cost["rows"].as_array().expect("a unit cost report");
    assert!(!rows.is_empty(), "{unit_cost}");
    let figure: f64 = unit_cost["total"]["unit_cost"]
        .as_str()
        .unwrap_or_else(|| panic!("a unit cost: {unit_cost}"))
        .parse()
        .unwrap();
    assert!(figure > 0.0, "{unit_cost}");
    assert_eq!(unit_cost["currency"], "USD");
    assert!(
        pg.join("data/postmaster.pid").exists(),
        "the private PostgreSQL runs"
    );
    // Last month's drafts are there to issue, none for unattributed, and the journal exports.
    let last = (chrono::Utc::now().date_naive().with_day(1).unwrap() - chrono::Duration::days(1))
        .format("%Y-%m")
        .to_string();
    // Its FOCUS 1.2 export passes the FinOps Foundation's validator, with no applicability
    // criteria declared and with those the export supports.
    let focus = client
        .get(format!("{}/v1/exports/focus?period={last}", demo.base))
        .bearer_auth(&demo.token)
        .send()
        .await
        .unwrap();
    assert_eq!(focus.status(), 200);
    let focus = focus.text().await.unwrap();
    assert!(focus.starts_with(
        "AvailabilityZone,BilledCost,BillingAccountId,BillingAccountName,BillingAccountType,"
    ));
    let criteria = slicemeter::exports::focus::FOCUS12_CRITERIA.join(",");
    for declared in [None, Some(criteria.as_str())] {
        focus_validate_1_2(&focus, declared);
    }
    let issued: serde_json::Value = client
        .post(format!("{}/v1/invoices/issue", demo.base))
        .bearer_auth(&demo.token)
        .json(&serde_json::json!({"period": last}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let invoices = issued.as_array().unwrap_or_else(|| panic!("{issued}"));
    assert!(invoices.len() >= 6, "{issued}");
    assert!(invoices.iter().all(|i| i["team"] != "unattributed"));
    let erp = client
        .get(format!("{}/v1/exports/erp?period={last}", demo.base))
        .bearer_auth(&demo.token)
        .send()
        .await
        .unwrap();
    assert_eq!(erp.status(), 200, "{:?}", erp.text().await);
    // The simulated fleet holds slices it does not need: right-sizing says so, and the plan
    // that follows frees a card.
    let recommendations: serde_json::Value = client
        .get(format!("{}/v1/recommendations?days=14", demo.base))
        .bearer_auth(&demo.token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let actions: Vec<&str> = recommendations
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    assert!(actions.contains(&"resize"), "{actions:?}");
    assert!(actions.contains(&"give_back"), "{actions:?}");
    let plan: serde_json::Value = client
        .get(format!("{}/v1/plans/consolidation", demo.base))
        .bearer_auth(&demo.token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let freed: usize = plan["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["freed"].as_array().unwrap().len())
        .sum();
    assert!(freed >= 1, "{plan}");
    assert_ne!(plan["monthly_saving"], "0", "{plan}");
    stop(demo);
    assert!(
        !pg.join("data/postmaster.pid").exists(),
        "Ctrl-C stopped the private PostgreSQL"
    );

    // A second demo reuses the folder: same cluster, the data still there.
    let demo = start(&pg);
    let r = client
        .get(format!("{}/v1/teams", demo.base))
        .bearer_auth(&demo.token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    stop(demo);
}

/// The FinOps Foundation's FOCUS 1.2 validator on `csv`: the project's shared check beside the
/// repository, or beside SLICEMETER_FOCUS_VALIDATE (the 1.0 one) for a checkout elsewhere.
fn focus_validate_1_2(csv: &str, criteria: Option<&str>) {
    let script = std::env::var("SLICEMETER_FOCUS_VALIDATE").map_or_else(
        |_| {
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../shared/scripts/focus-validate-1.2"
            )
            .to_owned()
        },
        |v10| format!("{v10}-1.2"),
    );
    assert!(
        std::path::Path::new(&script).exists(),
        "the FOCUS 1.2 validator wrapper is expected at {script}"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("focus.csv");
    std::fs::write(&file, csv).unwrap();
    let mut command = Command::new(&script);
    command.arg(&file);
    match criteria {
        Some(c) => command.env("SLICEMETER_FOCUS12_CRITERIA", c),
        None => command.env_remove("SLICEMETER_FOCUS12_CRITERIA"),
    };
    let out = command.output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && text.contains("focus-validate-1.2: all checks passed"),
        "criteria {criteria:?}:\n{text}"
    );
}
