//! `/policies`: the policies with what they have decided, the generations kept for
//! rollback with the rollback form, and the shadow report - what an operator reads before
//! promoting or rolling back.

use axum::response::Response;
use maud::{Markup, html};

use super::html::{form, page, table};
use crate::admin::session::Viewer;
use crate::admin::{AdminState, views};
use crate::envelope::rfc3339;

pub(super) fn render(state: &AdminState, viewer: &Viewer) -> Response {
    if state.open_reads() == verdict_registry::OpenReads::None
        && let Some(login) = super::html::unless_reader(viewer)
    {
        return login;
    }
    let mut generations: Vec<views::GenerationView> = state
        .registry
        .history()
        .iter()
        .map(|g| views::generation(g, false))
        .collect();
    generations.push(views::generation(&state.registry.current(), true));
    generations.reverse();
    let body = html! {
        h1 { "Policies" }
        (policies(&views::policies(&state.registry)))
        h2 { "Generations" }
        (generations_table(&generations))
        (rollback_form(&generations, viewer))
        h2 { "Shadow report" }
        (shadow_report(&state.registry.shadow_report()))
    };
    page("Policies", viewer, body)
}

fn policies(policies: &[views::PolicyView]) -> Markup {
    let rows: Vec<Vec<Markup>> = policies
        .iter()
        .map(|p| {
            vec![
                html! { (p.name) },
                match &p.component {
                    Some(c) => html! {
                        (c.name) " " (c.version) " "
                        code.muted { (c.sha256.get(..12).unwrap_or(&c.sha256)) }
                    },
                    None => html! { span.bad { "not loaded" } },
                },
                match p.loaded_at_ms {
                    Some(t) => html! { (rfc3339(t)) },
                    None => html! { "-" },
                },
                html! { (p.routes.join(", ")) },
                html! { (p.stats.decisions) },
                html! { (p.stats.faults) },
                html! { (p.uploads.len()) },
            ]
        })
        .collect();
    table(
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
    )
}

fn generations_table(generations: &[views::GenerationView]) -> Markup {
    let rows: Vec<Vec<Markup>> = generations
        .iter()
        .map(|g| {
            vec![
                if g.active {
                    html! { strong { (g.number) } " " span.pill { "active" } }
                } else {
                    html! { (g.number) }
                },
                html! { (rfc3339(g.activated_at_ms)) },
                html! { (g.cause) },
                html! {
                    @for (i, (topic, policy)) in g.routes.iter().enumerate() {
                        @if i > 0 { br; }
                        code { (topic) } " " (policy)
                    }
                },
            ]
        })
        .collect();
    table(&["generation", "activated", "cause", "routes"], &rows)
}

fn shadow_report(shadows: &[verdict_registry::ShadowReport]) -> Markup {
    if shadows.is_empty() {
        return html! { p.muted { "No route has a shadow policy." } };
    }
    let rows: Vec<Vec<Markup>> = shadows
        .iter()
        .map(|s| {
            let by_class = s
                .by_class
                .iter()
                .map(|(class, n)| format!("{class} {n}"))
                .collect::<Vec<_>>()
                .join(", ");
            vec![
                html! { code { (s.topic) } },
                html! { (s.active) },
                html! { (s.shadow) },
                html! { (s.compared) },
                html! { (s.disagreements) },
                html! { (by_class) },
            ]
        })
        .collect();
    table(
        &[
            "route",
            "active",
            "shadow",
            "compared",
            "disagreements",
            "by class",
        ],
        &rows,
    )
}

/// Roll one route, or every route, back to the generation before the active one.
fn rollback_form(generations: &[views::GenerationView], viewer: &Viewer) -> Markup {
    let Some(active) = generations.iter().find(|g| g.active) else {
        return html! {};
    };
    if generations.len() < 2 {
        return html! {
            p.muted { "No earlier generation is kept: nothing to roll back to." }
        };
    }
    let fields = html! {
        label {
            "Roll back "
            select name="topic" {
                option value="" { "every route" }
                @for topic in active.routes.keys() {
                    option value=(topic) { (topic) }
                }
            }
        }
        " "
        span.muted {
            "to the previous generation (a one-route rollback lasts until the next change \
             of any route)"
        }
    };
    form(
        "/policies/rollback",
        viewer.session(),
        "action",
        fields,
        "Roll back",
    )
}
