//! CSV cells as a spreadsheet would show them (issue 38): a pod named with a right-to-left
//! override reaches the team page's workloads CSV without it, so the cell reads as it was typed.

use axum::http::StatusCode;

use crate::support::*;

#[tokio::test]
async fn bidirectional_controls_never_reach_the_workloads_csv() {
    let app = TestApp::spawn().await;
    let r = crate::billing::rate_card(&app, "2026-09-01T00:00:00Z", "4.00").await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    app.put_team("search", &["search"]).await;
    // "exe.txt" shown as "txt.exe" once U+202E reverses it.
    let pod = "report\u{202E}txt.exe-7d9f8-abcde";
    let windows = vec![window(
        MIG_1G_A,
        "2026-09-01T00:00:00Z",
        "2026-09-01T01:00:00Z",
        "search",
        pod,
        3600.0,
    )];
    let b = batch("2026-09-01T00:00:00Z", "2026-09-01T01:00:00Z", windows);
    let r = app.ingest(&app.admin, &b).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let cookie = crate::fleet::ui_session(&app, &app.admin).await;
    let csv =
        crate::fleet::ui_page(&app, &cookie, "/ui/team/search/workloads.csv?month=2026-09").await;
    let mut rows = csv::Reader::from_reader(csv.as_bytes());
    let cells: Vec<String> = rows
        .records()
        .flat_map(|r| r.unwrap().iter().map(str::to_owned).collect::<Vec<_>>())
        .collect();
    assert!(
        cells.iter().any(|c| c.starts_with("reporttxt.exe")),
        "{csv}"
    );
    for bidi in [
        '\u{202A}', '\u{202B}', '\u{202C}', '\u{202D}', '\u{202E}', '\u{2066}', '\u{2067}',
        '\u{2068}', '\u{2069}', '\u{200E}', '\u{200F}', '\u{061C}',
    ] {
        assert!(!csv.contains(bidi), "U+{:04X} in {csv}", u32::from(bidi));
    }
}
