//! Charts as inline SVG, drawn on the server: no script, nothing to load.

use maud::{Markup, html};

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 90.0;

/// A line chart of `points` (`(x, y)`, x ascending) titled `title`; with fewer than two
/// points, a note that the samples are still coming.
pub(crate) fn line(title: &str, unit: &str, points: &[(u64, u64)]) -> Markup {
    let Some((&(x0, _), &(x1, last))) = points.first().zip(points.last()) else {
        return html! {
            figure.chart {
                figcaption { (title) }
                p.muted { "No samples yet." }
            }
        };
    };
    let top = points.iter().map(|p| p.1).max().unwrap_or(0).max(1);
    let caption = html! {
        figcaption { (title) " " span.muted { "now " (last) " " (unit) ", peak " (top) } }
    };
    if points.len() < 2 {
        return html! {
            figure.chart {
                (caption)
                p.muted { "One sample so far; the line starts with the next." }
            }
        };
    }
    let span = (x1.saturating_sub(x0)).max(1) as f64;
    let coords: Vec<String> = points
        .iter()
        .map(|&(x, y)| {
            let px = (x.saturating_sub(x0)) as f64 / span * WIDTH;
            let py = HEIGHT - (y as f64 / top as f64) * (HEIGHT - 4.0) - 2.0;
            format!("{px:.1},{py:.1}")
        })
        .collect();
    html! {
        figure.chart {
            (caption)
            svg viewBox=(format!("0 0 {WIDTH} {HEIGHT}")) width=(WIDTH) height=(HEIGHT)
                role="img" aria-label=(title) {
                line x1="0" y1=(HEIGHT) x2=(WIDTH) y2=(HEIGHT) class="axis" {}
                polyline points=(coords.join(" ")) class="series" {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_spans_the_width_and_its_peak_touches_the_top() {
        let svg = line("DLQ depth", "letters", &[(0, 0), (50, 10), (100, 5)]).into_string();
        assert!(
            svg.contains("points=\"0.0,88.0 320.0,2.0 640.0,45.0\""),
            "{svg}"
        );
        assert!(svg.contains("now 5 letters, peak 10"), "{svg}");
        assert!(
            line("t", "u", &[])
                .into_string()
                .contains("No samples yet.")
        );
        assert!(
            line("t", "u", &[(1, 3)])
                .into_string()
                .contains("One sample so far")
        );
        assert!(
            line("<t>", "u", &[(1, 3), (2, 4)])
                .into_string()
                .contains("aria-label=\"&lt;t&gt;\"")
        );
    }
}
