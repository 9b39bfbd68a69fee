//! Plots prefill tok/s against prompt length, one line per engine, from a results JSON written by
//! scripts/bench/combine.py (or `kiln bench --json`): the `rows` with `test` "prefill".
//!
//! Usage: plot_bench RESULTS.json OUT.png [--font FILE.ttf]
//! (default font: DejaVu Sans from /usr/share/fonts; any TrueType file will do).

use std::collections::BTreeMap;

use anyhow::{bail, ensure, Context, Result};
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

const FONTS: [&str; 2] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];

/// Engines in legend order, with their colours; others get the palette's next colours.
const KNOWN: [(&str, RGBColor); 3] = [
    ("kiln", RGBColor(200, 70, 20)),
    ("llama.cpp", RGBColor(40, 90, 180)),
    ("transformers", RGBColor(60, 150, 60)),
];

struct Args {
    input: String,
    output: String,
    font: Option<String>,
}

fn parse_args() -> Result<Args> {
    let mut positional = Vec::new();
    let mut font = None;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--font" => font = Some(it.next().context("--font needs a .ttf path")?),
            "-h" | "--help" => {
                println!("usage: plot_bench RESULTS.json OUT.png [--font FILE.ttf]");
                std::process::exit(0);
            }
            _ => positional.push(a),
        }
    }
    let [input, output]: [String; 2] = positional
        .try_into()
        .map_err(|_| anyhow::anyhow!("usage: plot_bench RESULTS.json OUT.png [--font FILE.ttf]"))?;
    Ok(Args {
        input,
        output,
        font,
    })
}

/// Prefill points per engine: (prompt length, tok/s), sorted by length.
fn prefill_series(doc: &serde_json::Value) -> Result<BTreeMap<String, Vec<(f64, f64)>>> {
    let rows = doc["rows"]
        .as_array()
        .context("the JSON has no `rows` array")?;
    let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for r in rows.iter().filter(|r| r["test"] == "prefill") {
        let engine = r["engine"].as_str().unwrap_or("kiln").to_string();
        let (Some(n), Some(t)) = (r["tokens"].as_f64(), r["tok_s"].as_f64()) else {
            bail!("a prefill row lacks `tokens` or `tok_s`: {r}");
        };
        series.entry(engine).or_default().push((n, t));
    }
    ensure!(!series.is_empty(), "no prefill rows to plot");
    for points in series.values_mut() {
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    Ok(series)
}

fn colour(engine: &str, index: usize) -> RGBColor {
    KNOWN
        .iter()
        .find(|(name, _)| *name == engine)
        .map(|(_, c)| *c)
        .unwrap_or_else(|| {
            let (r, g, b) = Palette99::COLORS[(index + 3) % Palette99::COLORS.len()];
            RGBColor(r, g, b)
        })
}

fn main() -> Result<()> {
    let args = parse_args()?;
    let text = std::fs::read_to_string(&args.input)
        .with_context(|| format!("cannot read {}", args.input))?;
    let doc: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", args.input))?;
    let series = prefill_series(&doc)?;

    let font_path = match &args.font {
        Some(f) => f.clone(),
        None => FONTS
            .iter()
            .find(|p| std::path::Path::new(p).exists())
            .context("no DejaVu Sans font found; pass --font FILE.ttf")?
            .to_string(),
    };
    let font =
        std::fs::read(&font_path).with_context(|| format!("cannot read the font {font_path}"))?;
    let font: &'static [u8] = Box::leak(font.into_boxed_slice());
    register_font("sans-serif", FontStyle::Normal, font)
        .map_err(|_| anyhow::anyhow!("{font_path} is not a usable TrueType font"))?;

    // x is log2 of the prompt length, so that doublings are evenly spaced and ticks land on powers of 2.
    let (mut x0, mut x1, mut y1) = (f64::MAX, f64::MIN, 0f64);
    for &(x, y) in series.values().flatten() {
        x0 = x0.min(x.log2());
        x1 = x1.max(x.log2());
        y1 = y1.max(y);
    }
    let (x0, x1) = (x0.floor() - 0.5, x1.ceil() + 0.5);

    let root = BitMapBackend::new(&args.output, (960, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let title = format!(
        "Prefill, one prompt: {} on {}",
        doc["model"].as_str().unwrap_or("model"),
        doc["device"].as_str().unwrap_or("device")
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(80)
        .build_cartesian_2d(x0..x1, 0f64..y1 * 1.15)?;
    chart
        .configure_mesh()
        .x_desc("prompt length (tokens)")
        .y_desc("prefill tok/s")
        .x_labels((x1 - x0) as usize + 1)
        .x_label_formatter(&|v| {
            if (v - v.round()).abs() > 1e-6 {
                return String::new();
            }
            let n = 2f64.powf(v.round());
            if n >= 1024.0 {
                format!("{:.0}k", n / 1024.0)
            } else {
                format!("{n:.0}")
            }
        })
        .y_label_formatter(&|y| {
            if y1 >= 10_000.0 {
                format!("{:.0}k", y / 1000.0)
            } else {
                format!("{y:.0}")
            }
        })
        .light_line_style(WHITE)
        .label_style(("sans-serif", 16))
        .axis_desc_style(("sans-serif", 18))
        .draw()?;

    let mut order: Vec<&String> = series.keys().collect();
    order.sort_by_key(|e| {
        KNOWN
            .iter()
            .position(|(k, _)| k == e)
            .unwrap_or(KNOWN.len())
    });
    for (i, engine) in order.into_iter().enumerate() {
        let c = colour(engine, i);
        let points: Vec<(f64, f64)> = series[engine].iter().map(|&(n, t)| (n.log2(), t)).collect();
        chart
            .draw_series(LineSeries::new(points.clone(), c.stroke_width(3)))?
            .label(engine.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], c.stroke_width(3)));
        chart.draw_series(points.into_iter().map(|p| Circle::new(p, 5, c.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 16))
        .draw()?;
    root.present()
        .with_context(|| format!("cannot write {}", args.output))?;
    eprintln!("wrote {}", args.output);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefill_rows_group_by_engine_sorted_by_length() {
        let doc = serde_json::json!({"rows": [
            {"engine": "llama.cpp", "test": "prefill", "tokens": 8192, "tok_s": 2.0},
            {"engine": "llama.cpp", "test": "prefill", "tokens": 2048, "tok_s": 3.0},
            {"engine": "kiln", "test": "decode", "tokens": 0, "tok_s": 9.0},
            {"test": "prefill", "tokens": 2048, "tok_s": 4.0},
        ]});
        let s = prefill_series(&doc).unwrap();
        assert_eq!(s["llama.cpp"], vec![(2048.0, 3.0), (8192.0, 2.0)]);
        assert_eq!(s["kiln"], vec![(2048.0, 4.0)]);
        let none = serde_json::json!({"rows": [{"engine": "kiln", "test": "decode", "tokens": 0, "tok_s": 1.0}]});
        assert!(prefill_series(&none).is_err());
        let bad =
            serde_json::json!({"rows": [{"engine": "kiln", "test": "prefill", "tok_s": 1.0}]});
        assert!(prefill_series(&bad).is_err());
    }
}
