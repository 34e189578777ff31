//! The Grafana dashboard (`host/gateway/dashboards/verdict.json`) against a running gateway:
//! every metric its queries name is one `/metrics` serves, with the type its suffix says, and
//! every query of a metric labelled by topic follows the `topic` filter. Its layout holds
//! together - unique panel ids, every panel inside the 24 columns and apart from the others,
//! every query on the `datasource` variable - and it has a panel for each question the book
//! says it answers. The book's picture of it (`docs/src/images/dashboard.svg`) is rendered
//! from the file here; `VERDICT_BLESS=1 cargo test -p verdict-tests --test all dashboard`
//! rewrites it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use verdict_tests::consumer::{Behaviour, Consumer};
use verdict_tests::gateway::{Route, TestConfig};
use verdict_tests::{fixtures, scratch_dir, wait_for};

/// The panels an operator looks for, by title.
const TITLES: [&str; 10] = [
    "Throughput",
    "Deliveries by outcome",
    "Retries against first attempts",
    "DLQ depth by DLQ",
    "DLQ ingress by DLQ",
    "Decision latency",
    "Policy faults and guardrail clamps",
    "Retry-budget holds",
    "Lease-lost settlements",
    "Admin auth failures",
];

/// What every panel and query names as its data source: the dashboard's variable.
const DATASOURCE: &str = "${datasource}";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn dashboard_file() -> PathBuf {
    root().join("host/gateway/dashboards/verdict.json")
}

fn rendering_file() -> PathBuf {
    root().join("docs/src/images/dashboard.svg")
}

fn dashboard() -> Value {
    let text = std::fs::read_to_string(dashboard_file()).expect("reading the dashboard");
    serde_json::from_str(&text).expect("the dashboard is JSON")
}

/// The dashboard's panels, in the file's order.
fn panels(dashboard: &Value) -> Vec<&Value> {
    dashboard["panels"]
        .as_array()
        .expect("the dashboard has panels")
        .iter()
        .collect()
}

/// A panel's title, for messages.
fn title(panel: &Value) -> &str {
    panel["title"].as_str().unwrap_or("(untitled)")
}

/// A panel's place on the grid: x, y, w, h.
fn grid(panel: &Value) -> [u64; 4] {
    ["x", "y", "w", "h"].map(|k| {
        panel["gridPos"][k]
            .as_u64()
            .unwrap_or_else(|| panic!("`{}`: no gridPos.{k}", title(panel)))
    })
}

/// A panel's queries, in order.
fn targets(panel: &Value) -> &[Value] {
    panel["targets"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// The queries of the dashboard's panels: every `targets[].expr`.
fn panel_expressions(dashboard: &Value) -> Vec<String> {
    panels(dashboard)
        .into_iter()
        .flat_map(targets)
        .filter_map(|t| t["expr"].as_str())
        .map(String::from)
        .collect()
}

/// The queries of the dashboard's template variables: `definition`, and `query` as text or
/// as the query editor's object.
fn variable_queries(dashboard: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for variable in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        for query in [
            &variable["definition"],
            &variable["query"],
            &variable["query"]["query"],
        ] {
            if let Some(query) = query.as_str() {
                out.push(query.to_string());
            }
        }
    }
    out
}

/// `verdict_...` names in `expressions`, as written (with the suffixes Prometheus adds).
fn metric_names(expressions: &[String]) -> BTreeSet<String> {
    crate::alerts::verdict_names(expressions.iter().map(String::as_str))
}

/// Each `verdict_...` selector of `expr`: the name and its label matchers (empty without
/// braces).
fn selectors(expr: &str) -> Vec<(String, String)> {
    expr.split("verdict_")
        .skip(1)
        .map(|rest| {
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            let matchers = rest[end..]
                .strip_prefix('{')
                .and_then(|m| m.split('}').next())
                .unwrap_or("");
            (format!("verdict_{}", &rest[..end]), matchers.to_string())
        })
        .collect()
}

/// The family a served name belongs to and the type its suffix says it is: `_total` a
/// counter; `_bucket`, `_sum` and `_count` a histogram; no suffix a gauge.
fn family_of(name: &str) -> (&str, &str) {
    if let Some(family) = name.strip_suffix("_total") {
        return (family, "counter");
    }
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(family) = name.strip_suffix(suffix) {
            return (family, "histogram");
        }
    }
    (name, "gauge")
}

/// The sample lines of `name` (exactly that name, with or without labels).
fn samples<'m>(metrics: &'m str, name: &str) -> Vec<&'m str> {
    metrics
        .lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .collect()
}

/// The value of the sample line that starts with `series` (name and labels), 0 without one.
fn value(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix(series)?.trim().parse::<f64>().ok())
        .sum()
}

#[test]
fn every_expression_of_the_dashboard_names_a_served_metric() {
    let dashboard = dashboard();
    let expressions = panel_expressions(&dashboard);
    let names = metric_names(&[expressions.clone(), variable_queries(&dashboard)].concat());
    assert!(
        names.contains("verdict_dlq_depth") && names.len() >= 10,
        "{names:?}"
    );

    let dir = scratch_dir("dashboard");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // One message fails once and is retried, one is dead-lettered at once.
    let consumer = Consumer::start(&runtime, |id| {
        if id == "poison" {
            Behaviour::Permanent
        } else {
            Behaviour::FailsFirst(1)
        }
    });
    let gw = TestConfig::new()
        .policy("rules", fixtures::RULES)
        .route(
            Route::new("orders", "rules")
                .config(fixtures::RULES_CONFIG)
                .consumer(&consumer.url()),
        )
        .start_on(runtime, &dir, "dashboard-token");
    let _: Value = gw
        .admin
        .post(
            "/v1/topics/orders/messages",
            &json!([{"id": "flaky", "payload": 1}, {"id": "poison", "payload": 2}]),
        )
        .unwrap();
    let settled = wait_for(Duration::from_secs(30), || {
        gw.store
            .counts()
            .is_ok_and(|c| c.delivered == 1 && c.dead == 1)
    });
    assert!(settled, "{:?}", gw.store.counts());
    // A wrong admin token.
    let refused = gw.client(Some("not-the-dashboard-token")).post::<Value>(
        "/v1/topics/orders/messages",
        &json!({"id": "x", "payload": 3}),
    );
    assert!(refused.is_err(), "{refused:?}");

    let metrics = gw.anonymous.get_text("/metrics").unwrap();
    assert!(
        value(
            &metrics,
            r#"verdict_verdicts_applied_total{topic="orders",action="retry"}"#
        ) >= 1.0,
        "{metrics}"
    );
    assert!(
        value(&metrics, "verdict_admin_auth_failures_total") >= 1.0,
        "{metrics}"
    );
    for name in &names {
        let (family, kind) = family_of(name);
        let declared = format!("# TYPE {family} {kind}");
        assert!(
            metrics.lines().any(|l| l == declared.as_str()),
            "the dashboard names `{name}`, which /metrics does not serve as a {kind} \
             (no `{declared}`):\n{metrics}"
        );
        assert!(
            !samples(&metrics, name).is_empty(),
            "the dashboard names `{name}`, which /metrics has no series of:\n{metrics}"
        );
    }
    // The panels follow the topic filter wherever there is a topic to filter on.
    for expr in &expressions {
        for (name, matchers) in selectors(expr) {
            let by_topic = samples(&metrics, &name)
                .iter()
                .any(|l| l.contains("topic=\""));
            assert!(
                !by_topic || matchers.contains(r#"topic=~"$topic""#),
                "`{name}` has a topic label but this query does not filter on it: {expr}"
            );
        }
    }
}

#[test]
fn every_panel_has_a_unique_id_a_place_on_the_grid_and_a_query_on_the_chosen_data_source() {
    let dashboard = dashboard();
    assert_eq!(dashboard["uid"], "verdict-gateway");
    assert_eq!(dashboard["title"], "Verdict gateway");
    assert_eq!(dashboard["schemaVersion"], 39);

    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("the dashboard has template variables");
    let variable = |name: &str| {
        variables
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no `{name}` variable"))
    };
    let datasource = variable("datasource");
    assert_eq!(datasource["type"], "datasource");
    assert_eq!(datasource["query"], "prometheus");
    let topic = variable("topic");
    assert_eq!(topic["type"], "query");
    assert_eq!(topic["multi"], true);
    assert_eq!(topic["includeAll"], true);
    assert_eq!(topic["datasource"]["uid"], DATASOURCE);
    assert!(
        topic["definition"]
            .as_str()
            .is_some_and(|q| q.starts_with("label_values(verdict_") && q.ends_with(", topic)")),
        "{}",
        topic["definition"]
    );

    let panels = panels(&dashboard);
    let mut ids = BTreeSet::new();
    let mut placed: Vec<(&str, [u64; 4])> = Vec::new();
    for panel in &panels {
        let title = title(panel);
        let id = panel["id"]
            .as_u64()
            .unwrap_or_else(|| panic!("`{title}` has no id"));
        assert!(ids.insert(id), "`{title}`: id {id} is another panel's too");

        let [x, y, w, h] = grid(panel);
        assert!(
            w > 0 && h > 0 && x + w <= 24,
            "`{title}` is not inside the 24 columns: {}",
            panel["gridPos"]
        );
        for (other, [ox, oy, ow, oh]) in &placed {
            let apart = x + w <= *ox || ox + ow <= x || y + h <= *oy || oy + oh <= y;
            assert!(apart, "`{title}` overlaps `{other}`");
        }
        placed.push((title, [x, y, w, h]));

        assert!(
            matches!(panel["type"].as_str(), Some("timeseries" | "stat")),
            "`{title}`: {}",
            panel["type"]
        );
        assert!(
            panel["fieldConfig"]["defaults"]["unit"].is_string(),
            "`{title}` has no unit"
        );
        assert_eq!(panel["datasource"]["uid"], DATASOURCE, "`{title}`");
        assert!(!targets(panel).is_empty(), "`{title}` has no query");
        for target in targets(panel) {
            assert!(
                target["expr"]
                    .as_str()
                    .is_some_and(|e| !e.trim().is_empty()),
                "`{title}`: a query without an expression: {target}"
            );
            assert_eq!(target["datasource"]["uid"], DATASOURCE, "`{title}`");
        }
    }
    let titles: BTreeSet<&str> = panels.iter().copied().map(title).collect();
    for needed in TITLES {
        assert!(titles.contains(needed), "no panel `{needed}`: {titles:?}");
    }
}

/// Pixels of one of the grid's 24 columns (the picture is 960 wide) and of one grid row.
const COLUMN_PX: u64 = 40;
const ROW_PX: u64 = 30;
/// The band above the panels: the dashboard's title and variables.
const HEADER_PX: u64 = 40;
/// Space between two panels, and inside a panel around its text.
const GAP_PX: u64 = 4;
const PAD_PX: u64 = 8;
/// The expression's monospace text: 10 px, about 6 px a character, 13 px a line.
const CHAR_PX: u64 = 6;
const LINE_PX: u64 = 13;
/// The title's 13 px sans-serif, about 7 px a character.
const TITLE_CHAR_PX: u64 = 7;

/// `text` for an SVG text node or attribute.
fn xml(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// `text` cut to `width` characters, `...` at the end when it was longer.
fn fit(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let kept: String = text.chars().take(width.saturating_sub(3)).collect();
    format!("{kept}...")
}

/// `text` on lines of at most `width` characters, broken after a space, a comma or an opening
/// or closing brace or parenthesis where one is in the second half of the line, anywhere
/// otherwise; at most `lines` of them, the last one ending in `...` when the text goes on.
fn wrap(text: &str, width: usize, lines: usize) -> Vec<String> {
    let width = width.max(4);
    let mut rest: Vec<char> = text
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .collect();
    let mut out = Vec::new();
    while !rest.is_empty() && out.len() < lines {
        if out.len() + 1 == lines && rest.len() > width {
            let line: String = rest.iter().collect();
            out.push(fit(line.trim_start(), width));
            break;
        }
        let mut end = rest.len().min(width);
        if end < rest.len()
            && let Some(space) = rest[width / 2..end]
                .iter()
                .rposition(|c| matches!(*c, ' ' | ',' | '(' | '{' | '}'))
        {
            end = width / 2 + space + 1;
        }
        let line: String = rest[..end].iter().collect();
        out.push(line.trim().to_string());
        rest = rest[end..].to_vec();
    }
    out
}

/// The dashboard's layout as an SVG: each panel a rectangle at its place on the grid, with
/// its title, its type and unit, and its first query.
fn render(dashboard: &Value) -> String {
    let panels = panels(dashboard);
    let rows = panels
        .iter()
        .map(|p| {
            let [_, y, _, h] = grid(p);
            y + h
        })
        .max()
        .unwrap_or(0);
    let (width, height) = (24 * COLUMN_PX, HEADER_PX + rows * ROW_PX);
    let variables: Vec<String> = dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str())
        .map(|name| format!("${name}"))
        .collect();
    let mut svg = vec![
        format!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif">"#
        ),
        format!(r##"<rect width="{width}" height="{height}" fill="#111217"/>"##),
        format!(
            r##"<text x="{PAD_PX}" y="26" font-size="16" font-weight="bold" fill="#ccccdc">{}</text>"##,
            xml(dashboard["title"].as_str().unwrap_or(""))
        ),
        format!(
            r##"<text x="{}" y="26" font-size="12" text-anchor="end" fill="#8e8e8e">{}</text>"##,
            width - PAD_PX,
            xml(&variables.join("  "))
        ),
    ];
    for panel in panels {
        let [x, y, w, h] = grid(panel);
        let (left, top) = (
            x * COLUMN_PX + GAP_PX / 2,
            HEADER_PX + y * ROW_PX + GAP_PX / 2,
        );
        let (inner_w, inner_h) = (w * COLUMN_PX - GAP_PX, h * ROW_PX - GAP_PX);
        let text_x = left + PAD_PX;
        let kind = panel["type"].as_str().unwrap_or("?");
        let kind = match panel["fieldConfig"]["defaults"]["unit"].as_str() {
            Some(unit) => format!("{kind}, {unit}"),
            None => kind.to_string(),
        };
        let title_chars = usize::try_from((inner_w - 2 * PAD_PX) / TITLE_CHAR_PX).unwrap_or(0);
        let expr_chars = usize::try_from((inner_w - 2 * PAD_PX) / CHAR_PX).unwrap_or(0);
        // Expression lines start 52 px down and end a padding above the bottom.
        let expr_lines =
            usize::try_from((inner_h + LINE_PX).saturating_sub(52 + PAD_PX) / LINE_PX).unwrap_or(0);
        svg.push(format!(
            r##"<rect class="panel" x="{left}" y="{top}" width="{inner_w}" height="{inner_h}" rx="4" fill="#181b1f" stroke="#2c3235"/>"##
        ));
        svg.push(format!(
            r##"<text x="{text_x}" y="{}" font-size="13" font-weight="bold" fill="#ccccdc">{}</text>"##,
            top + 20,
            xml(&fit(title(panel), title_chars))
        ));
        svg.push(format!(
            r##"<text x="{text_x}" y="{}" font-size="10" fill="#8e8e8e">{}</text>"##,
            top + 35,
            xml(&kind)
        ));
        let first = targets(panel)
            .first()
            .and_then(|t| t["expr"].as_str())
            .unwrap_or("");
        for (i, line) in wrap(first, expr_chars, expr_lines).iter().enumerate() {
            let line_y = top + 52 + LINE_PX * i as u64;
            svg.push(format!(
                r##"<text x="{text_x}" y="{line_y}" font-family="monospace" font-size="10" fill="#6e9fff">{}</text>"##,
                xml(line)
            ));
        }
    }
    svg.push("</svg>".to_string());
    svg.join("\n") + "\n"
}

#[test]
fn the_books_rendering_of_the_dashboard_is_current() {
    let dashboard = dashboard();
    let rendered = render(&dashboard);
    let parsed = roxmltree::Document::parse(&rendered).expect("the rendering is XML");
    let drawn = parsed
        .descendants()
        .filter(|n| n.tag_name().name() == "rect" && n.attribute("class") == Some("panel"))
        .count();
    assert_eq!(drawn, panels(&dashboard).len());

    let path = rendering_file();
    if std::env::var_os("VERDICT_BLESS").is_some() {
        std::fs::write(&path, &rendered).expect("writing the rendering");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == rendered,
        "{} is stale: run `VERDICT_BLESS=1 cargo test -p verdict-tests --test all dashboard`",
        path.display()
    );
}
