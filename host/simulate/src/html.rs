//! The report as one HTML file: the figures side by side (one column per report) and the
//! plots - deliveries per second split into first attempts and retries, the retries a
//! retry budget held back (when a run had one), and the backlog -
//! drawn as inline SVG by `plotters`. No script, nothing fetched: it opens from disk in
//! any browser, and a CI job can keep it as an artifact.

use std::fmt::Write as _;

use plotters::prelude::*;

use crate::Report;
use verdict_runtime::text::escape_html as escape;

const WIDTH: u32 = 960;
const HEIGHT: u32 = 300;

/// One series drawn: a label, its points per second, a colour, dashed or not.
struct Line<'a> {
    label: String,
    values: &'a [u64],
    colour: RGBColor,
}

const FIRST: RGBColor = RGBColor(0x24, 0x57, 0xc5);
const RETRY: RGBColor = RGBColor(0xd9, 0x48, 0x1c);
const OTHER_FIRST: RGBColor = RGBColor(0x7f, 0x9c, 0xe0);
const OTHER_RETRY: RGBColor = RGBColor(0xf0, 0xa0, 0x80);
const HELD: RGBColor = RGBColor(0x5c, 0x5c, 0x5c);
const OTHER_HELD: RGBColor = RGBColor(0xa8, 0xa8, 0xa8);

/// `reports` (one, or two compared on the same scenario) as a whole HTML page.
pub fn html(reports: &[&Report]) -> String {
    let Some(first) = reports.first() else {
        return String::new();
    };
    let mut out = format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>{} - verdict simulate</title><style>{STYLE}</style></head><body>\
         <h1>Scenario {} <small>seed {}, {:.0} s simulated</small></h1>",
        escape(&first.scenario),
        escape(&first.scenario),
        first.seed,
        first.simulated_s
    );
    out += &figures(reports);
    let mut deliveries = Vec::new();
    let mut backlog = Vec::new();
    let mut held_back = Vec::new();
    for (i, r) in reports.iter().enumerate() {
        let (f, rt, held) = if i == 0 {
            (FIRST, RETRY, HELD)
        } else {
            (OTHER_FIRST, OTHER_RETRY, OTHER_HELD)
        };
        let who = if reports.len() > 1 {
            format!(" ({})", if i == 0 { "a" } else { "b" })
        } else {
            String::new()
        };
        deliveries.push(Line {
            label: format!("first attempts{who}"),
            values: &r.series.first_attempts,
            colour: f,
        });
        deliveries.push(Line {
            label: format!("retries{who}"),
            values: &r.series.retries,
            colour: rt,
        });
        if r.retry_budget.is_some() {
            held_back.push(Line {
                label: format!("held by the retry budget{who}"),
                values: &r.series.held,
                colour: held,
            });
        }
        backlog.push(Line {
            label: format!("backlog{who}"),
            values: &r.series.backlog,
            colour: f,
        });
    }
    out += "<h2>Deliveries per second: what the dependency sees</h2>";
    out += &plot("deliveries per second", &deliveries);
    if !held_back.is_empty() {
        out += "<h2>Retries held by the retry budget per second (waiting, not delivered)</h2>";
        out += &plot("holds per second", &held_back);
    }
    out += "<h2>Backlog: messages published and not yet ended</h2>";
    out += &plot("messages", &backlog);
    out += "</body></html>\n";
    out
}

fn figures(reports: &[&Report]) -> String {
    let mut out = String::from("<table><thead><tr><th></th>");
    for (i, r) in reports.iter().enumerate() {
        let tag = if reports.len() > 1 {
            format!("{}: ", if i == 0 { "a" } else { "b" })
        } else {
            String::new()
        };
        let _ = write!(out, "<th>{tag}{}</th>", escape(&r.policy));
    }
    out += "</tr></thead><tbody>";
    let rows: Vec<Vec<(&str, String)>> = reports.iter().map(|r| r.rows()).collect();
    for (i, (label, _)) in rows[0].iter().enumerate() {
        let _ = write!(out, "<tr><th>{}</th>", escape(label));
        for r in &rows {
            let _ = write!(out, "<td>{}</td>", escape(&r[i].1));
        }
        out += "</tr>";
    }
    out + "</tbody></table>"
}

/// One chart of `lines` over the simulated seconds, as SVG (empty when there is nothing to
/// draw or drawing failed - the figures above still say it all).
fn plot(y_label: &str, lines: &[Line<'_>]) -> String {
    let seconds = lines.iter().map(|l| l.values.len()).max().unwrap_or(0);
    let peak = lines
        .iter()
        .flat_map(|l| l.values.iter().copied())
        .max()
        .unwrap_or(0);
    if seconds == 0 {
        return "<p>Nothing to draw.</p>".into();
    }
    let mut svg = String::new();
    let drawn = draw(&mut svg, y_label, lines, seconds, peak);
    match drawn {
        Ok(()) => format!("<figure>{svg}</figure>"),
        Err(e) => format!("<p>The chart could not be drawn: {}</p>", escape(&e)),
    }
}

fn draw(
    svg: &mut String,
    y_label: &str,
    lines: &[Line<'_>],
    seconds: usize,
    peak: u64,
) -> Result<(), String> {
    let area = SVGBackend::with_string(svg, (WIDTH, HEIGHT)).into_drawing_area();
    area.fill(&WHITE).map_err(|e| e.to_string())?;
    let top = (peak as f64 * 1.1).max(1.0);
    let mut chart = ChartBuilder::on(&area)
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(0f64..seconds as f64, 0f64..top)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc(y_label)
        .light_line_style(RGBColor(0xee, 0xf0, 0xf4))
        .draw()
        .map_err(|e| e.to_string())?;
    for line in lines {
        let colour = line.colour;
        chart
            .draw_series(LineSeries::new(
                line.values
                    .iter()
                    .enumerate()
                    .map(|(s, v)| (s as f64, *v as f64)),
                colour.stroke_width(2),
            ))
            .map_err(|e| e.to_string())?
            .label(line.label.clone())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], colour.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .border_style(RGBColor(0xd9, 0xde, 0xe7))
        .background_style(WHITE)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(|e| e.to_string())?;
    area.present().map_err(|e| e.to_string())?;
    Ok(())
}

const STYLE: &str = "body{font:14px/1.45 system-ui,sans-serif;color:#1d2330;margin:24px;\
    max-width:1000px}h1{font-size:20px}h1 small{color:#5d6677;font-weight:normal;\
    font-size:14px}h2{font-size:16px;margin-top:28px}table{border-collapse:collapse}\
    th,td{text-align:left;padding:4px 12px 4px 0;border-bottom:1px solid #d9dee7;\
    vertical-align:top}thead th{color:#5d6677}figure{margin:8px 0}";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_policy::retry_until;
    use crate::{Scenario, simulate};
    use verdict_runtime::Guardrails;

    #[test]
    fn a_report_page_draws_its_plots_and_escapes_what_came_from_files() {
        let scenario = Scenario::parse(
            "name = \"<b>x</b>\"\nduration_s = 30\n[publish]\nphases = [{ from_s = 0, \
             rate_per_s = 20 }]\n[consumer]\ncapacity_per_s = 100\nphases = [{ from_s = 5, \
             answers = [{ kind = \"http.503\", pct = 50 }] }, { from_s = 20 }]\n",
            "t.toml",
        )
        .unwrap();
        let report = simulate(&scenario, &Guardrails::default(), &retry_until(3, 1_000));
        let page = html(&[&report]);
        assert!(
            page.contains("&lt;b&gt;x&lt;/b&gt;") && !page.contains("<b>x"),
            "{page}"
        );
        assert_eq!(page.matches("<svg").count(), 2, "{page}");
        assert!(
            page.contains("retries") && page.contains("polyline"),
            "{page}"
        );
        assert!(!page.contains("<script"));
    }
}
