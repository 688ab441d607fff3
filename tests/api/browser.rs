//! The dashboard in a real browser: Debian's chromium driven by npm's playwright-core
//! (tests/browser/dashboard.test.mjs) against the real server on loopback. Screenshots of every page
//! land in target/ui-screenshots/.

use std::path::{Path, PathBuf};
use std::process::Command;

use slicemeter::domain::access::Role;

use crate::support::*;

const CHROMIUM: &str = "/usr/bin/chromium";

fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser")
}

/// Installs playwright-core from the lock file when it is missing (never a browser download).
fn ensure_playwright() {
    if browser_dir()
        .join("node_modules/playwright-core/package.json")
        .exists()
    {
        return;
    }
    let out = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund"])
        .current_dir(browser_dir())
        .env("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
        .output()
        .expect("npm runs (install Node.js and npm: `sudo apt-get install nodejs npm`)");
    assert!(
        out.status.success(),
        "npm ci failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_dashboard_shows_each_role_the_apis_figures_and_nothing_else_in_a_real_browser() {
    assert!(
        Path::new(CHROMIUM).exists(),
        "the browser tests need Debian's chromium at {CHROMIUM}: `sudo apt-get install chromium`"
    );
    ensure_playwright();

    let app = TestApp::spawn().await;
    crate::exports::simulated_month(&app).await;
    // MIG cards of the last hour, for the plan page.
    crate::plans::quarter_used_cards(&app).await;
    let report = app
        .get(Some(&app.admin), "/v1/reports/monthly/2026-09")
        .await;
    let lead_team = report.body["teams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["team"].as_str().unwrap().to_owned())
        .find(|t| t != "unattributed")
        .expect("a team with usage");
    // An oversized slice of the lead's team, for the team page's right-sizing.
    crate::recommendations::oversized_for(&app, &lead_team).await;
    let finance = app.token(Role::Finance, None, None).await;
    let lead = app.token(Role::TeamLead, Some(&lead_team), None).await;

    let served = app.serve(test_config()).await;
    let base = &served.base;

    let screenshots = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target/tmp has a parent")
        .join("ui-screenshots");
    let out = tokio::process::Command::new("node")
        .arg("dashboard.test.mjs")
        .current_dir(browser_dir())
        .env("BASE_URL", base)
        .env("MONTH", "2026-09")
        .env("ADMIN_TOKEN", &app.admin)
        .env("FINANCE_TOKEN", &finance)
        .env("LEAD_TOKEN", &lead)
        .env("LEAD_TEAM", &lead_team)
        .env("SCREENSHOTS", &screenshots)
        .output()
        .await
        .expect("node runs");
    served.stop().await;
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the browser test failed:\n{text}");
    assert!(text.contains("all on loopback"), "{text}");
    for shot in [
        "signin.png",
        "fleet.png",
        "team.png",
        "team-phone.png",
        "plan.png",
        "plan-phone.png",
        "forbidden.png",
        "tokens.png",
        "invoice.png",
    ] {
        assert!(screenshots.join(shot).exists(), "no screenshot {shot}");
    }
}
