//! Drawing with plotters: each figure rendered twice, SVG and PNG, with a bundled font
//! (DejaVu Sans) so that text renders on machines that have no fonts installed.

use std::path::{Path, PathBuf};
use std::sync::Once;

use anyhow::{Result, anyhow};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{FontStyle, register_font};

const FONT: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");
pub const SIZE: (u32, u32) = (900, 600);
/// Pixels allowed per character of a 12-px axis label: DejaVu Sans's advance, rounded up.
const LABEL_CHAR_PX: u32 = 7;

fn fonts() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        assert!(
            register_font("sans-serif", FontStyle::Normal, FONT).is_ok(),
            "the bundled font parses"
        );
    });
}

/// A figure, drawable on any backend.
pub enum Figure {
    Heatmap {
        title: String,
        x_label: String,
        y_label: String,
        value_label: String,
        heat: Heat,
    },
    Lines {
        title: String,
        x_label: String,
        y_label: String,
        series: Vec<Series>,
        log_x: bool,
        log_y: bool,
    },
    Bars {
        title: String,
        y_label: String,
        categories: Vec<String>,
        series: Vec<(String, Vec<f64>)>,
        /// Error bar half-widths per series and category (linear scale), or a log y axis.
        spread: Option<Vec<Vec<f64>>>,
    },
}

impl Figure {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        match self {
            Figure::Heatmap {
                title,
                x_label,
                y_label,
                value_label,
                heat,
            } => heatmap(root, title, x_label, y_label, value_label, heat),
            Figure::Lines {
                title,
                x_label,
                y_label,
                series,
                log_x,
                log_y,
            } => lines(root, title, x_label, y_label, series, *log_x, *log_y),
            Figure::Bars {
                title,
                y_label,
                categories,
                series,
                spread,
            } => bars(root, title, y_label, categories, series, spread.as_deref()),
        }
    }
}

/// Render a figure to `<stem>.svg` and `<stem>.png`; returns both paths.
pub fn render(stem: &Path, fig: &Figure) -> Result<(PathBuf, PathBuf)> {
    fonts();
    let svg = stem.with_extension("svg");
    let png = stem.with_extension("png");
    {
        let root = SVGBackend::new(&svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        fig.draw(&root)?;
        root.present()
            .map_err(|e| anyhow!("{}: {e:?}", svg.display()))?;
    }
    {
        let root = BitMapBackend::new(&png, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        fig.draw(&root)?;
        root.present()
            .map_err(|e| anyhow!("{}: {e:?}", png.display()))?;
    }
    Ok((svg, png))
}

/// The series palette.
pub fn color(i: usize) -> RGBColor {
    const C: [RGBColor; 8] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
    ];
    C[i % C.len()]
}

/// A colour for `t` in [0, 1] on a viridis-like ramp.
pub fn ramp(t: f64) -> RGBColor {
    let stops = [
        (68.0, 1.0, 84.0),
        (59.0, 82.0, 139.0),
        (33.0, 145.0, 140.0),
        (94.0, 201.0, 98.0),
        (253.0, 231.0, 37.0),
    ];
    let t = t.clamp(0.0, 1.0) * (stops.len() - 1) as f64;
    let i = (t.floor() as usize).min(stops.len() - 2);
    let f = t - i as f64;
    let mix = |a: f64, b: f64| (a + (b - a) * f) as u8;
    RGBColor(
        mix(stops[i].0, stops[i + 1].0),
        mix(stops[i].1, stops[i + 1].1),
        mix(stops[i].2, stops[i + 1].2),
    )
}

/// A chart with the lab's caption, margin and label areas (x as given, y 70 px).
fn builder<'a, 'b, DB: DrawingBackend>(
    root: &'a DrawingArea<DB, Shift>,
    title: &str,
    x_area: u32,
) -> ChartBuilder<'a, 'b, DB> {
    let mut b = ChartBuilder::on(root);
    b.caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(x_area)
        .y_label_area_size(70);
    b
}

/// The legend box every line and bar chart draws.
fn legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
) -> Result<()> {
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(err)
}

pub fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("drawing: {e:?}")
}

/// One heatmap cell: column label index, row (bin) index, value.
pub struct Heat {
    pub columns: Vec<String>,
    pub rows: Vec<String>,
    pub cells: Vec<(usize, usize, f64)>,
}

/// A heatmap with a colour legend: x categorical, y categorical bins, colour = value.
pub fn heatmap<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    x_label: &str,
    y_label: &str,
    value_label: &str,
    h: &Heat,
) -> Result<()> {
    let (main, legend) = root.split_horizontally(SIZE.0 - 110);
    let (lo, hi) = h
        .cells
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), c| {
            (a.min(c.2), b.max(c.2))
        });
    let span = if hi > lo { hi - lo } else { 1.0 };
    let nx = h.columns.len().max(1);
    let ny = h.rows.len().max(1);
    let mut chart = ChartBuilder::on(&main)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..nx as f64, 0f64..ny as f64)
        .map_err(err)?;
    let cols = h.columns.clone();
    let rows = h.rows.clone();
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .x_labels(nx * 2 + 1)
        .y_labels(ny * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - i as f64 - 0.5).abs() < 1e-6 {
                cols.get(i).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|y| {
            let i = y.floor() as usize;
            if (y - i as f64 - 0.5).abs() < 1e-6 {
                rows.get(i).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(err)?;
    chart
        .draw_series(h.cells.iter().map(|&(x, y, v)| {
            Rectangle::new(
                [
                    (x as f64 + 0.02, y as f64 + 0.02),
                    (x as f64 + 0.98, y as f64 + 0.98),
                ],
                ramp((v - lo) / span).filled(),
            )
        }))
        .map_err(err)?;
    chart
        .draw_series(h.cells.iter().map(|&(x, y, v)| {
            Text::new(
                format!("{v:.2}"),
                (x as f64 + 0.3, y as f64 + 0.55),
                ("sans-serif", 12).into_font().color(&WHITE),
            )
        }))
        .map_err(err)?;
    let mut bar = ChartBuilder::on(&legend)
        .margin_top(50)
        .margin_bottom(57)
        .margin_right(10)
        .y_label_area_size(45)
        .caption(value_label, ("sans-serif", 14))
        .build_cartesian_2d(0f64..1f64, lo..lo + span)
        .map_err(err)?;
    bar.configure_mesh()
        .disable_mesh()
        .disable_x_axis()
        .y_labels(6)
        .label_style(("sans-serif", 12))
        .draw()
        .map_err(err)?;
    bar.draw_series((0..50).map(|i| {
        let a = lo + span * i as f64 / 50.0;
        let b = lo + span * (i + 1) as f64 / 50.0;
        Rectangle::new([(0.0, a), (1.0, b)], ramp(i as f64 / 49.0).filled())
    }))
    .map_err(err)?;
    Ok(())
}

/// A named series of (x, y) points.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Draw lines between points (else markers only).
    pub line: bool,
    /// Optional error bars: (x, y − e, y + e).
    pub bars: Vec<(f64, f64, f64)>,
}

impl Series {
    /// Points joined by a line, with error bars added as they come.
    pub fn line(name: &str) -> Series {
        Series {
            line: true,
            ..Series::scatter(name, Vec::new())
        }
    }

    /// A point at (x, mean) with its interval as an error bar (none for a single value).
    pub fn push_interval(&mut self, x: f64, mean: f64, lo: f64, hi: f64) {
        self.points.push((x, mean));
        if lo.is_finite() && hi.is_finite() {
            self.bars.push((x, lo, hi));
        }
    }

    /// Markers only, no error bars: one point per run.
    pub fn scatter(name: &str, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.to_string(),
            points,
            line: false,
            bars: vec![],
        }
    }
}

/// The range of one axis that holds every point and every error bar of `series` whole, padded;
/// `coord` picks the axis from an (x, y) pair.
fn extent(series: &[Series], coord: fn(&(f64, f64)) -> f64, log: bool) -> (f64, f64) {
    let (a, b) = series
        .iter()
        .flat_map(|s| {
            let bars = s.bars.iter().flat_map(|&(x, lo, hi)| [(x, lo), (x, hi)]);
            s.points.iter().copied().chain(bars)
        })
        .map(|p| coord(&p))
        .filter(|v| v.is_finite() && (!log || *v > 0.0))
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
            (a.min(x), b.max(x))
        });
    if !a.is_finite() {
        return (if log { 1.0 } else { 0.0 }, 1.0);
    }
    if log {
        (a / 1.5, b * 1.5)
    } else {
        let pad = ((b - a) * 0.08).max(1e-9);
        (a - pad, b + pad)
    }
}

/// Lines and points on linear or log axes.
#[allow(clippy::too_many_arguments)]
pub fn lines<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log_x: bool,
    log_y: bool,
) -> Result<()> {
    let (x0, x1) = extent(series, |p| p.0, log_x);
    let (y0, y1) = extent(series, |p| p.1, log_y);
    macro_rules! draw {
        ($chart:expr) => {{
            let mut chart = $chart;
            // Large or tiny values (FLOPs) as 1.2e13, others as they are.
            let tick = |v: &f64| {
                if *v != 0.0 && (v.abs() >= 1e5 || v.abs() < 1e-3) {
                    format!("{v:.1e}")
                } else {
                    format!("{}", (v * 1e4).round() / 1e4)
                }
            };
            chart
                .configure_mesh()
                .x_desc(x_label)
                .y_desc(y_label)
                .x_label_formatter(&tick)
                .y_label_formatter(&tick)
                .x_labels(8)
                .label_style(("sans-serif", 13))
                .draw()
                .map_err(err)?;
            for (i, s) in series.iter().enumerate() {
                let c = color(i);
                let pts: Vec<(f64, f64)> = s
                    .points
                    .iter()
                    .copied()
                    .filter(|p| p.1.is_finite() && (!log_y || p.1 > 0.0))
                    .collect();
                if s.line {
                    chart
                        .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
                        .map_err(err)?;
                }
                let anno = chart
                    .draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled())))
                    .map_err(err)?;
                anno.label(s.name.clone())
                    .legend(move |(x, y)| Circle::new((x + 8, y), 5, c.filled()));
                for &(x, lo, hi) in &s.bars {
                    chart
                        .draw_series(std::iter::once(PathElement::new(
                            vec![(x, lo), (x, hi)],
                            c.stroke_width(2),
                        )))
                        .map_err(err)?;
                }
            }
            legend(&mut chart)?;
        }};
    }
    let mut b = builder(root, title, 45);
    match (log_x, log_y) {
        (true, true) => draw!(
            b.build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())
                .map_err(err)?
        ),
        (true, false) => draw!(
            b.build_cartesian_2d((x0..x1).log_scale(), y0..y1)
                .map_err(err)?
        ),
        (false, true) => draw!(
            b.build_cartesian_2d(x0..x1, (y0..y1).log_scale())
                .map_err(err)?
        ),
        (false, false) => draw!(b.build_cartesian_2d(x0..x1, y0..y1).map_err(err)?),
    }
    Ok(())
}

/// Grouped bars: one group per category, one bar per series. Without `spread` the y axis is
/// logarithmic; with it, linear, with ± error bars.
pub fn bars<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    y_label: &str,
    categories: &[String],
    series: &[(String, Vec<f64>)],
    spread: Option<&[Vec<f64>]>,
) -> Result<()> {
    let top = series
        .iter()
        .enumerate()
        .flat_map(|(j, s)| {
            s.1.iter()
                .enumerate()
                .map(move |(i, v)| v + spread.map_or(0.0, |e| e[j][i]))
        })
        .fold(1.0f64, f64::max);
    let n = categories.len().max(1);
    let k = series.len().max(1);
    let w = 0.8 / k as f64;
    let cats = categories.to_vec();
    // Category names wider than their slot stand upright, in a label area tall enough for them.
    let longest = categories
        .iter()
        .map(|c| c.chars().count())
        .max()
        .unwrap_or(0) as u32;
    let upright = longest * LABEL_CHAR_PX > (SIZE.0 - 100) / n as u32;
    let x_area = if upright {
        (longest * LABEL_CHAR_PX + 15).min(SIZE.1 / 2)
    } else {
        60
    };
    // Plotters centres its own axis labels on the tick, so upright ones are drawn here.
    let x_style = TextStyle::from(("sans-serif", 12).into_font())
        .transform(FontTransform::Rotate90)
        .pos(Pos::new(HPos::Left, VPos::Center));
    macro_rules! draw {
        ($chart:expr, $base:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(n * 2 + 1)
                .x_label_formatter(&|x| {
                    let i = x.floor() as usize;
                    if !upright && (x - i as f64 - 0.5).abs() < 1e-6 {
                        cats.get(i).cloned().unwrap_or_default()
                    } else {
                        String::new()
                    }
                })
                .y_desc(y_label)
                .label_style(("sans-serif", 12))
                .draw()
                .map_err(err)?;
            for (j, (name, vals)) in series.iter().enumerate() {
                let c = color(j);
                let anno = chart
                    .draw_series(vals.iter().enumerate().filter(|(_, v)| **v > 0.0).map(
                        |(i, &v)| {
                            let x = i as f64 + 0.1 + j as f64 * w;
                            Rectangle::new([(x, $base), (x + w * 0.95, v)], c.filled())
                        },
                    ))
                    .map_err(err)?;
                anno.label(name.clone()).legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled())
                });
                if let Some(e) = spread {
                    chart
                        .draw_series(vals.iter().enumerate().map(|(i, &v)| {
                            let x = i as f64 + 0.1 + (j as f64 + 0.475) * w;
                            PathElement::new(
                                vec![(x, (v - e[j][i]).max($base)), (x, v + e[j][i])],
                                BLACK.stroke_width(2),
                            )
                        }))
                        .map_err(err)?;
                }
            }
            if upright {
                for (i, c) in cats.iter().enumerate() {
                    let (px, py) = chart.backend_coord(&(i as f64 + 0.5, $base));
                    root.draw(&Text::new(c.clone(), (px, py + 8), x_style.clone()))
                        .map_err(err)?;
                }
            }
            legend(&mut chart)?;
        }};
    }
    let mut b = builder(root, title, x_area);
    if spread.is_some() {
        draw!(
            b.build_cartesian_2d(0f64..n as f64, 0f64..top * 1.15)
                .map_err(err)?,
            0.0
        );
    } else {
        draw!(
            b.build_cartesian_2d(0f64..n as f64, (0.5f64..top * 2.0).log_scale())
                .map_err(err)?,
            0.5
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_axes_hold_every_error_bar_whole() {
        let mut s = Series::line("c");
        s.push_interval(1.0, 10.0, 4.0, 15.0);
        s.push_interval(2.0, 8.0, 7.5, 8.5);
        let (y0, y1) = extent(std::slice::from_ref(&s), |p| p.1, false);
        assert!(
            y0 < 4.0 && y1 > 15.0,
            "y axis {y0}..{y1} cuts the bar 4..15"
        );
        let (x0, x1) = extent(std::slice::from_ref(&s), |p| p.0, true);
        assert!(x0 < 1.0 && x1 > 2.0, "x axis {x0}..{x1}");
        // On a log axis a bar reaching 0 or below keeps the positive part only.
        let mut z = Series::line("z");
        z.push_interval(1.0, 0.5, -0.2, 2.0);
        let (y0, y1) = extent(&[z], |p| p.1, true);
        assert!(y0 > 0.0 && y0 < 0.5 && y1 > 2.0, "log y axis {y0}..{y1}");
    }

    /// The SVG tag that draws `name` as a category label, and the (x, y) it is anchored at.
    fn label_tag(svg: &str, name: &str) -> (String, f64, f64) {
        let at = svg.find(&format!(">\n{name}\n</text>")).expect(name);
        let tag = &svg[svg[..at].rfind("<text").unwrap()..at];
        let num = |k: &str| -> f64 {
            let v = &tag[tag.find(k).unwrap() + k.len()..];
            v[..v.find('"').unwrap()].parse().unwrap()
        };
        (tag.to_string(), num(" x=\""), num(" y=\""))
    }

    #[test]
    fn bar_labels_too_wide_for_their_slot_stand_upright_below_the_axis() {
        let bars = |categories: Vec<String>| {
            let n = categories.len();
            Figure::Bars {
                title: "t".into(),
                y_label: "v".into(),
                categories,
                series: vec![("s".into(), vec![1.0; n])],
                spread: Some(vec![vec![0.5; n]]),
            }
        };
        let dir = tempfile::tempdir().unwrap();
        let long: Vec<String> = (0..14)
            .map(|i| format!("100k L{i} teacherless + hash"))
            .collect();
        let (svg, _) = render(&dir.path().join("long"), &bars(long.clone())).unwrap();
        let svg = std::fs::read_to_string(svg).unwrap();
        let mut last_x = 0.0;
        for name in &long {
            let (tag, x, y) = label_tag(&svg, name);
            assert!(tag.contains("rotate(90"), "{name} lies flat: {tag}");
            assert!(x > last_x, "{name} is out of order");
            last_x = x;
            let bottom = y + f64::from(LABEL_CHAR_PX) * name.len() as f64;
            assert!(
                y > SIZE.1 as f64 / 2.0 && bottom < SIZE.1 as f64,
                "{name} runs from y {y} to {bottom}, outside the label area"
            );
        }
        let short = vec!["L1".to_string(), "L2".to_string()];
        let (svg, _) = render(&dir.path().join("short"), &bars(short.clone())).unwrap();
        let svg = std::fs::read_to_string(svg).unwrap();
        for name in &short {
            let (tag, _, _) = label_tag(&svg, name);
            assert!(!tag.contains("rotate"), "{name} stands upright: {tag}");
        }
    }
}
