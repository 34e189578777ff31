//! Charts as inline SVG, drawn on the server: no script, nothing to load.

use std::fmt::Write as _;

use super::html::escape;

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 90.0;

/// A line chart of `points` (`(x, y)`, x ascending) titled `title`; with fewer than two
/// points, a note that the samples are still coming.
pub(crate) fn line(title: &str, unit: &str, points: &[(u64, u64)]) -> String {
    let mut out = format!("<figure class=\"chart\"><figcaption>{}", escape(title));
    let Some((&(x0, _), &(x1, last))) = points.first().zip(points.last()) else {
        out += "</figcaption><p class=\"muted\">No samples yet.</p></figure>";
        return out;
    };
    let top = points.iter().map(|p| p.1).max().unwrap_or(0).max(1);
    let _ = write!(
        out,
        " <span class=\"muted\">now {last} {}, peak {top}</span></figcaption>",
        escape(unit)
    );
    if points.len() < 2 {
        out += "<p class=\"muted\">One sample so far; the line starts with the next.</p></figure>";
        return out;
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
    let _ = write!(
        out,
        "<svg viewBox=\"0 0 {WIDTH} {HEIGHT}\" width=\"{WIDTH}\" height=\"{HEIGHT}\" \
         role=\"img\" aria-label=\"{}\"><line x1=\"0\" y1=\"{HEIGHT}\" x2=\"{WIDTH}\" \
         y2=\"{HEIGHT}\" class=\"axis\"/><polyline points=\"{}\" class=\"series\"/></svg>\
         </figure>",
        escape(title),
        coords.join(" ")
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_spans_the_width_and_its_peak_touches_the_top() {
        let svg = line("DLQ depth", "letters", &[(0, 0), (50, 10), (100, 5)]);
        assert!(
            svg.contains("points=\"0.0,88.0 320.0,2.0 640.0,45.0\""),
            "{svg}"
        );
        assert!(svg.contains("now 5 letters, peak 10"), "{svg}");
        assert!(line("t", "u", &[]).contains("No samples yet."));
        assert!(line("t", "u", &[(1, 3)]).contains("One sample so far"));
        assert!(line("<t>", "u", &[(1, 3), (2, 4)]).contains("aria-label=\"&lt;t&gt;\""));
    }
}
