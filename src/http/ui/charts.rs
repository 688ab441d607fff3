//! Server-rendered SVG charts: axes with units, legends, and a `<title>` on every mark, which browsers
//! show on hover and screen readers read. Each chart is an `img` with a title and a description; the
//! page puts the same figures in a table beside it.

use maud::{Markup, html};

use crate::domain::team::TeamId;

/// Team colours: distinguishable, dark enough to read against white.
const PALETTE: [&str; 12] = [
    "#1f77b4", "#d95f02", "#2ca02c", "#7570b3", "#e7298a", "#8c564b", "#17becf", "#a6761d",
    "#393b79", "#1b9e77", "#9467bd", "#bcbd22",
];

/// Colours for the teams on a page: the n-th team in id order gets the n-th colour, so that teams
/// side by side never share one (up to twelve); `unattributed` is always grey.
#[derive(Debug, Clone, Default)]
pub struct Palette(std::collections::BTreeMap<String, &'static str>);

impl Palette {
    pub fn new<'a>(teams: impl IntoIterator<Item = &'a str>) -> Palette {
        let mut ids: Vec<&str> = teams
            .into_iter()
            .filter(|t| *t != crate::domain::team::UNATTRIBUTED)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        Palette(
            ids.into_iter()
                .enumerate()
                .map(|(i, t)| (t.to_owned(), PALETTE[i % PALETTE.len()]))
                .collect(),
        )
    }

    pub fn colour(&self, team: &str) -> &'static str {
        self.0.get(team).copied().unwrap_or("#999999")
    }
}

/// Round numbers for an axis: a step of 1, 2 or 5 times a power of ten, about five ticks.
fn ticks(max: f64) -> (f64, Vec<f64>) {
    if max <= 0.0 {
        return (1.0, vec![0.0, 1.0]);
    }
    let raw = max / 5.0;
    let power = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * power);
    let top = (max / step).ceil() * step;
    let n = (top / step).round() as usize;
    (top, (0..=n).map(|i| i as f64 * step).collect())
}

fn tick_label(v: f64) -> String {
    if v >= 1_000_000.0 {
        format!("{:.1}M", v / 1_000_000.0)
    } else if v >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// A bar: label under it, value for its height, and the text shown on hover.
pub struct Bar {
    pub label: String,
    pub value: f64,
    pub hover: String,
    pub colour: &'static str,
}

const W: f64 = 640.0;
const H: f64 = 260.0;
const LEFT: f64 = 64.0;
const BOTTOM: f64 = 48.0;
const TOP: f64 = 16.0;

fn y_axis(top: f64, marks: &[f64], unit: &str) -> Markup {
    let plot = H - BOTTOM - TOP;
    html! {
        @for m in marks {
            @let y = TOP + plot - m / top * plot;
            line x1=(LEFT) x2=(W - 8.0) y1=(y) y2=(y) stroke="#ddd" {}
            text x=(LEFT - 6.0) y=(y + 4.0) text-anchor="end" font-size="11" fill="#333" { (tick_label(*m)) }
        }
        line x1=(LEFT) x2=(LEFT) y1=(TOP) y2=(H - BOTTOM) stroke="#333" {}
        line x1=(LEFT) x2=(W - 8.0) y1=(H - BOTTOM) y2=(H - BOTTOM) stroke="#333" {}
        text x="12" y=(TOP + plot / 2.0) font-size="11" fill="#333"
            transform=(format!("rotate(-90 12 {})", TOP + plot / 2.0)) text-anchor="middle" { (unit) }
    }
}

/// A vertical bar chart. `id` makes the title and description ids unique on the page.
pub fn bars(id: &str, title: &str, description: &str, unit: &str, bars: &[Bar]) -> Markup {
    let max = bars.iter().map(|b| b.value).fold(0.0, f64::max);
    let (top, marks) = ticks(max);
    let plot = H - BOTTOM - TOP;
    let slot = (W - LEFT - 8.0) / bars.len().max(1) as f64;
    let width = (slot * 0.7).min(48.0);
    html! {
        svg class="chart" viewBox=(format!("0 0 {W} {H}")) role="img"
            aria-labelledby=(format!("{id}-title {id}-desc")) data-chart=(id) {
            title id=(format!("{id}-title")) { (title) }
            desc id=(format!("{id}-desc")) { (description) }
            (y_axis(top, &marks, unit))
            @for (i, b) in bars.iter().enumerate() {
                @let h = if top > 0.0 { b.value / top * plot } else { 0.0 };
                @let x = LEFT + slot * i as f64 + (slot - width) / 2.0;
                g class="mark" {
                    title { (b.hover) }
                    rect x=(x) y=(TOP + plot - h) width=(width) height=(h.max(0.0)) fill=(b.colour) {}
                }
                text x=(x + width / 2.0) y=(H - BOTTOM + 14.0) text-anchor="middle" font-size="11" fill="#333" {
                    (b.label)
                }
            }
        }
    }
}

/// One series of stacked columns: its value in each column.
pub struct Stack {
    pub name: String,
    pub colour: &'static str,
    pub values: Vec<f64>,
}

/// A range drawn over one column (a forecast's band): from `low` to `high`, hovering `hover`.
pub struct Band {
    pub column: usize,
    pub low: f64,
    pub high: f64,
    pub hover: String,
}

/// Column `i`'s stacks above zero, each with the height it starts at.
fn cut(stacks: &[Stack], i: usize) -> Vec<(&Stack, f64, f64)> {
    let mut base = 0.0;
    let mut out = Vec::new();
    for s in stacks {
        let v = s.values.get(i).copied().unwrap_or(0.0).max(0.0);
        if v > 0.0 {
            out.push((s, base, v));
            base += v;
        }
    }
    out
}

/// Vertical columns over labelled x positions, each cut into its stacks, with a legend; a dashed
/// horizontal line (`reference`, a budget) and bands over columns (forecasts) where given.
#[allow(clippy::too_many_arguments)]
pub fn columns(
    id: &str,
    title: &str,
    description: &str,
    unit: &str,
    x: &[String],
    stacks: &[Stack],
    reference: Option<(f64, String)>,
    bands: &[Band],
) -> Markup {
    let totals: Vec<f64> = (0..x.len())
        .map(|i| {
            stacks
                .iter()
                .map(|s| s.values.get(i).copied().unwrap_or(0.0).max(0.0))
                .sum()
        })
        .collect();
    let max = totals
        .iter()
        .copied()
        .chain(reference.as_ref().map(|r| r.0))
        .chain(bands.iter().map(|b| b.high))
        .fold(0.0, f64::max);
    let (top, marks) = ticks(max);
    let plot = H - BOTTOM - TOP;
    let slot = (W - LEFT - 8.0) / x.len().max(1) as f64;
    let width = (slot * 0.7).min(48.0);
    let py = |v: f64| TOP + plot - v / top * plot;
    let label_every = x.len().div_ceil(12).max(1);
    let legend_rows =
        stacks.len().div_ceil(3) + usize::from(reference.is_some() || !bands.is_empty());
    html! {
        svg class="chart" viewBox=(format!("0 0 {W} {}", H + 8.0 + 18.0 * legend_rows as f64)) role="img"
            aria-labelledby=(format!("{id}-title {id}-desc")) data-chart=(id) {
            title id=(format!("{id}-title")) { (title) }
            desc id=(format!("{id}-desc")) { (description) }
            (y_axis(top, &marks, unit))
            @for (i, label) in x.iter().enumerate() {
                @let left = LEFT + slot * i as f64 + (slot - width) / 2.0;
                @for (s, base, v) in cut(stacks, i) {
                    g class="mark" {
                        title { (label) ", " (s.name) ": " (format!("{v:.2}")) " " (unit) }
                        rect x=(left) y=(py(base + v)) width=(width) height=((v / top * plot).max(0.0)) fill=(s.colour) {}
                    }
                }
                @if i % label_every == 0 {
                    text x=(left + width / 2.0) y=(H - BOTTOM + 14.0) text-anchor="middle" font-size="10" fill="#333" { (label) }
                }
            }
            @for b in bands {
                @let cx = LEFT + slot * b.column as f64 + slot / 2.0;
                g class="mark" data-band=(b.column) {
                    title { (b.hover) }
                    line x1=(cx) x2=(cx) y1=(py(b.low)) y2=(py(b.high)) stroke="#333" stroke-width="2" {}
                    line x1=(cx - 6.0) x2=(cx + 6.0) y1=(py(b.low)) y2=(py(b.low)) stroke="#333" stroke-width="2" {}
                    line x1=(cx - 6.0) x2=(cx + 6.0) y1=(py(b.high)) y2=(py(b.high)) stroke="#333" stroke-width="2" {}
                }
            }
            @if let Some((v, hover)) = &reference {
                g class="mark" data-reference="budget" {
                    title { (hover) }
                    line x1=(LEFT) x2=(W - 8.0) y1=(py(*v)) y2=(py(*v)) stroke="#b00020" stroke-width="2" stroke-dasharray="6 4" {}
                }
            }
            @for (k, s) in stacks.iter().enumerate() {
                @let lx = LEFT + 190.0 * (k % 3) as f64;
                @let ly = H + 6.0 + 18.0 * (k / 3) as f64;
                rect x=(lx) y=(ly) width="12" height="12" fill=(s.colour) {}
                text x=(lx + 16.0) y=(ly + 10.0) font-size="11" fill="#333" { (s.name) }
            }
            @if reference.is_some() || !bands.is_empty() {
                @let ly = H + 6.0 + 18.0 * stacks.len().div_ceil(3) as f64;
                @if reference.is_some() {
                    line x1=(LEFT) x2=(LEFT + 12.0) y1=(ly + 6.0) y2=(ly + 6.0) stroke="#b00020" stroke-width="2" stroke-dasharray="4 2" {}
                    text x=(LEFT + 16.0) y=(ly + 10.0) font-size="11" fill="#333" { "budget" }
                }
                @if !bands.is_empty() {
                    line x1=(LEFT + 196.0) x2=(LEFT + 196.0) y1=(ly) y2=(ly + 12.0) stroke="#333" stroke-width="2" {}
                    text x=(LEFT + 206.0) y=(ly + 10.0) font-size="11" fill="#333" { "forecast p10–p90" }
                }
            }
        }
    }
}

/// One series of a line chart.
pub struct Series {
    pub name: String,
    pub colour: &'static str,
    pub values: Vec<f64>,
    /// Hover text per point.
    pub hovers: Vec<String>,
}

/// A line chart over labelled x positions (days), with a legend.
pub fn lines(
    id: &str,
    title: &str,
    description: &str,
    unit: &str,
    x: &[String],
    series: &[Series],
) -> Markup {
    let max = series
        .iter()
        .flat_map(|s| s.values.iter().copied())
        .fold(0.0, f64::max);
    let (top, marks) = ticks(max);
    let plot = H - BOTTOM - TOP;
    let step = (W - LEFT - 40.0) / (x.len().max(2) - 1) as f64;
    let px = |i: usize| LEFT + 8.0 + step * i as f64;
    let py = |v: f64| TOP + plot - v / top * plot;
    let label_every = x.len().div_ceil(8).max(1);
    html! {
        svg class="chart" viewBox=(format!("0 0 {W} {}", H + 24.0)) role="img"
            aria-labelledby=(format!("{id}-title {id}-desc")) data-chart=(id) {
            title id=(format!("{id}-title")) { (title) }
            desc id=(format!("{id}-desc")) { (description) }
            (y_axis(top, &marks, unit))
            @for (i, label) in x.iter().enumerate() {
                @if i % label_every == 0 {
                    text x=(px(i)) y=(H - BOTTOM + 14.0) text-anchor="middle" font-size="10" fill="#333" { (label) }
                }
            }
            @for s in series {
                @let points: Vec<String> = s.values.iter().enumerate().map(|(i, v)| format!("{:.1},{:.1}", px(i), py(*v))).collect();
                polyline points=(points.join(" ")) fill="none" stroke=(s.colour) stroke-width="2" {}
                @for (i, v) in s.values.iter().enumerate() {
                    g class="mark" {
                        title { (s.hovers.get(i).cloned().unwrap_or_default()) }
                        circle cx=(px(i)) cy=(py(*v)) r="3" fill=(s.colour) {}
                    }
                }
            }
            @for (k, s) in series.iter().enumerate() {
                @let lx = LEFT + 180.0 * k as f64;
                rect x=(lx) y=(H + 6.0) width="12" height="12" fill=(s.colour) {}
                text x=(lx + 16.0) y=(H + 16.0) font-size="11" fill="#333" { (s.name) }
            }
        }
    }
}

/// A part of a stacked bar.
pub struct Segment {
    pub label: String,
    pub value: f64,
    pub hover: String,
    pub colour: &'static str,
}

/// One horizontal bar cut into segments, with a legend: parts of a whole.
pub fn stacked(id: &str, title: &str, description: &str, segments: &[Segment]) -> Markup {
    let total: f64 = segments.iter().map(|s| s.value.max(0.0)).sum();
    let width = W - 16.0;
    let placed = place(
        8.0,
        segments.iter().map(|s| {
            if total > 0.0 {
                s.value.max(0.0) / total * width
            } else {
                0.0
            }
        }),
    );
    html! {
        svg class="chart" viewBox=(format!("0 0 {W} {}", 64 + 20 * segments.len())) role="img"
            aria-labelledby=(format!("{id}-title {id}-desc")) data-chart=(id) {
            title id=(format!("{id}-title")) { (title) }
            desc id=(format!("{id}-desc")) { (description) }
            @for (s, (x, w)) in segments.iter().zip(&placed) {
                g class="mark" {
                    title { (s.hover) }
                    rect x=(x) y="8" width=(w) height="32" fill=(s.colour) {}
                }
            }
            @for (k, s) in segments.iter().enumerate() {
                @let y = 56.0 + 20.0 * k as f64;
                rect x="8" y=(y) width="12" height="12" fill=(s.colour) {}
                text x="26" y=(y + 10.0) font-size="12" fill="#333" { (s.label) ": " (s.hover) }
            }
        }
    }
}

/// Lays widths end to end from `start`: `(x, width)` of each.
fn place(start: f64, widths: impl Iterator<Item = f64>) -> Vec<(f64, f64)> {
    let mut x = start;
    widths
        .map(|w| {
            let at = x;
            x += w;
            (at, w)
        })
        .collect()
}

/// A GPU as a bar cut into its slices (width: the slice's physical share), coloured by the team
/// holding it; what no slice reserves stays grey.
pub struct GpuBar {
    pub label: String,
    /// Where the label leads: a group's bar drills down to its GPUs.
    pub link: Option<String>,
    pub slices: Vec<SliceMark>,
}

pub struct SliceMark {
    pub share: f64,
    pub team: Option<TeamId>,
    pub hover: String,
}

pub fn gpu_map(id: &str, gpus: &[GpuBar], palette: &Palette) -> Markup {
    let row = 22.0;
    let left = 230.0;
    let width = W - left - 8.0;
    let mut teams: Vec<&str> = gpus
        .iter()
        .flat_map(|g| {
            g.slices
                .iter()
                .filter_map(|s| s.team.as_ref().map(TeamId::as_str))
        })
        .collect();
    teams.sort_unstable();
    teams.dedup();
    let height = 8.0 + row * gpus.len() as f64 + 24.0 + 18.0 * teams.len().div_ceil(4) as f64;
    html! {
        svg class="chart gpu-map" viewBox=(format!("0 0 {W} {height}")) role="img"
            aria-labelledby=(format!("{id}-title {id}-desc")) data-chart=(id) {
            title id=(format!("{id}-title")) { "GPU map" }
            desc id=(format!("{id}-desc")) {
                "Each GPU as a bar cut into its slices, a slice as wide as its physical share and coloured by the team holding it; grey is free or unallocated."
            }
            @for (i, g) in gpus.iter().enumerate() {
                @let y = 8.0 + row * i as f64;
                @if let Some(link) = &g.link {
                    a href=(link) {
                        text x=(left - 6.0) y=(y + 14.0) text-anchor="end" font-size="10" fill="#1f5fa8" text-decoration="underline" { (g.label) }
                    }
                } @else {
                    text x=(left - 6.0) y=(y + 14.0) text-anchor="end" font-size="10" fill="#333" { (g.label) }
                }
                rect x=(left) y=(y) width=(width) height=(row - 6.0) fill="#eee" stroke="#bbb" {}
                @let placed = place(left, g.slices.iter().map(|s| (s.share.clamp(0.0, 1.0) * width).max(1.0)));
                @for (s, (x, w)) in g.slices.iter().zip(&placed) {
                    g class="mark" {
                        title { (s.hover) }
                        rect x=(x) y=(y) width=(w) height=(row - 6.0)
                            fill=(s.team.as_ref().map_or("#d9d9d9", |t| palette.colour(t.as_str()))) stroke="#fff" {}
                    }
                }
            }
            @for (k, t) in teams.iter().enumerate() {
                @let lx = 8.0 + 156.0 * (k % 4) as f64;
                @let ly = 8.0 + row * gpus.len() as f64 + 16.0 + 18.0 * (k / 4) as f64;
                rect x=(lx) y=(ly) width="12" height="12" fill=(palette.colour(t)) {}
                text x=(lx + 16.0) y=(ly + 10.0) font-size="11" fill="#333" { (t) }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_get_round_ticks() {
        assert_eq!(ticks(2880.0).1.last().copied(), Some(3000.0));
        assert_eq!(ticks(0.0), (1.0, vec![0.0, 1.0]));
        assert_eq!(ticks(7.0).1, vec![0.0, 2.0, 4.0, 6.0, 8.0]);
    }

    #[test]
    fn a_bar_chart_is_a_labelled_image_with_a_hover_text_per_bar() {
        let svg = bars(
            "cost",
            "Cost by team",
            "what each team pays",
            "USD",
            &[Bar {
                label: "nlp".into(),
                value: 1337.14,
                hover: "nlp: USD 1,337.14".into(),
                colour: "#123456",
            }],
        )
        .into_string();
        assert!(svg.contains(r#"role="img""#));
        assert!(svg.contains(r#"aria-labelledby="cost-title cost-desc""#));
        assert!(svg.contains("<title>nlp: USD 1,337.14</title>"));
        assert!(svg.contains(">nlp</text>"));
    }
}
