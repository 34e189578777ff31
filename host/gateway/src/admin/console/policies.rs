//! `/policies`: the policies with what they have decided, the generations kept for
//! rollback with the rollback form, and the shadow report - what an operator reads before
//! promoting or rolling back.

use axum::response::Response;

use super::html::{escape, form, page, table};
use crate::admin::session::Viewer;
use crate::admin::{AdminState, views};
use crate::envelope::rfc3339;

pub(super) fn render(state: &AdminState, viewer: &Viewer) -> Response {
    if state.open_reads() == verdict_registry::OpenReads::None
        && let Some(login) = super::html::unless_reader(viewer)
    {
        return login;
    }
    let mut body = String::from("<h1>Policies</h1>");
    let policies = views::policies(&state.registry);
    let rows: Vec<Vec<String>> = policies
        .iter()
        .map(|p| {
            vec![
                escape(&p.name),
                p.component.as_ref().map_or_else(
                    || "<span class=\"bad\">not loaded</span>".into(),
                    |c| {
                        format!(
                            "{} {} <code class=\"muted\">{}</code>",
                            escape(&c.name),
                            escape(&c.version),
                            escape(c.sha256.get(..12).unwrap_or(&c.sha256))
                        )
                    },
                ),
                p.loaded_at_ms
                    .map_or_else(|| "-".into(), |t| escape(&rfc3339(t))),
                escape(&p.routes.join(", ")),
                p.stats.decisions.to_string(),
                p.stats.faults.to_string(),
                p.uploads.len().to_string(),
            ]
        })
        .collect();
    body += &table(
        &[
            "policy",
            "component",
            "loaded",
            "routes",
            "decisions",
            "faults",
            "uploads",
        ],
        &rows,
    );

    body += "<h2>Generations</h2>";
    let mut generations: Vec<views::GenerationView> = state
        .registry
        .history()
        .iter()
        .map(|g| views::generation(g, false))
        .collect();
    generations.push(views::generation(&state.registry.current(), true));
    generations.reverse();
    let rows: Vec<Vec<String>> = generations
        .iter()
        .map(|g| {
            let routes: Vec<String> = g
                .routes
                .iter()
                .map(|(topic, policy)| format!("<code>{}</code> {}", escape(topic), escape(policy)))
                .collect();
            vec![
                if g.active {
                    format!(
                        "<strong>{}</strong> <span class=\"pill\">active</span>",
                        g.number
                    )
                } else {
                    g.number.to_string()
                },
                escape(&rfc3339(g.activated_at_ms)),
                escape(&g.cause),
                routes.join("<br>"),
            ]
        })
        .collect();
    body += &table(&["generation", "activated", "cause", "routes"], &rows);
    body += &rollback_form(&generations, viewer);

    body += "<h2>Shadow report</h2>";
    let shadows = state.registry.shadow_report();
    if shadows.is_empty() {
        body += "<p class=\"muted\">No route has a shadow policy.</p>";
    } else {
        let rows: Vec<Vec<String>> = shadows
            .iter()
            .map(|s| {
                vec![
                    format!("<code>{}</code>", escape(&s.topic)),
                    escape(&s.active),
                    escape(&s.shadow),
                    s.compared.to_string(),
                    s.disagreements.to_string(),
                    escape(
                        &s.by_class
                            .iter()
                            .map(|(class, n)| format!("{class} {n}"))
                            .collect::<Vec<_>>()
                            .join(", "),
                    ),
                ]
            })
            .collect();
        body += &table(
            &[
                "route",
                "active",
                "shadow",
                "compared",
                "disagreements",
                "by class",
            ],
            &rows,
        );
    }
    page("Policies", viewer, &body)
}

/// Roll one route, or every route, back to the generation before the active one.
fn rollback_form(generations: &[views::GenerationView], viewer: &Viewer) -> String {
    let Some(active) = generations.iter().find(|g| g.active) else {
        return String::new();
    };
    if generations.len() < 2 {
        return "<p class=\"muted\">No earlier generation is kept: nothing to roll back to.</p>"
            .into();
    }
    let mut options = String::from("<option value=\"\">every route</option>");
    for topic in active.routes.keys() {
        options += &format!("<option value=\"{0}\">{0}</option>", escape(topic));
    }
    form(
        "/policies/rollback",
        viewer.session(),
        "action",
        &format!(
            "<label>Roll back <select name=\"topic\">{options}</select></label> \
             <span class=\"muted\">to the previous generation (a one-route rollback lasts \
             until the next change of any route)</span>"
        ),
        "Roll back",
    )
}
