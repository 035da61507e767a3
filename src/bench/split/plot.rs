//! The sweep's plot: wall time and bytes written against parent size, log–log, one line
//! per configuration (docs/bench/split.svg).

use std::path::Path;

use anyhow::{anyhow, Result};

use super::report::{size_label, Report};
use super::{Content, GIB, MAIN, MIB};

/// A configuration's points: (parent GiB, wall s, written MiB).
type Series = (&'static str, Vec<(f64, f64, f64)>);

/// Wall time and bytes written against parent size, log–log, one line per configuration.
pub fn plot(path: &Path, rep: &Report) -> Result<()> {
    use plotters::prelude::*;
    let a = rep.a;
    let series: Vec<Series> = MAIN
        .iter()
        .map(|c| {
            let mut pts: Vec<(f64, f64, f64)> = rep
                .rows
                .iter()
                .filter(|r| {
                    r.config == c.name
                        && r.cache == "cold"
                        && r.partition_size == a.partition_size
                        && r.content == Content::Compressible
                })
                .map(|r| {
                    (
                        r.size_bytes as f64 / GIB as f64,
                        r.wall_s.median,
                        r.write_bytes.median / MIB as f64,
                    )
                })
                .collect();
            pts.sort_by(|x, y| x.0.total_cmp(&y.0));
            (c.name, pts)
        })
        .filter(|(_, p)| !p.is_empty())
        .collect();
    if series.is_empty() {
        return Ok(());
    }
    let all = series.iter().flat_map(|(_, p)| p.iter());
    let (mut xmin, mut xmax) = (f64::MAX, f64::MIN);
    let (mut wmin, mut wmax, mut bmax) = (f64::MAX, f64::MIN, f64::MIN);
    for &(x, w, b) in all {
        xmin = xmin.min(x);
        xmax = xmax.max(x);
        wmin = wmin.min(w.max(1e-3));
        wmax = wmax.max(w);
        bmax = bmax.max(b);
    }
    // Bytes written of 0 (a pure reflink) would be -inf on a log axis: floor at 4 KiB.
    const BYTES_FLOOR_MIB: f64 = 4.0 / 1024.0;
    let err = |e: &dyn std::fmt::Debug| anyhow!("drawing {}: {e:?}", path.display());
    let root = SVGBackend::new(path, (1280, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let root = root
        .titled(
            &format!(
                "cleave bench split: {}-way split, {} partitions, cold cache, XFS loop (2-core VM); median of {}",
                a.parts,
                size_label(a.partition_size),
                a.iterations
            ),
            ("sans-serif", 18),
        )
        .map_err(|e| err(&e))?;
    let (charts, legend) = root.split_horizontally(1040);
    let (left, right) = charts.split_horizontally(520);
    let colors = [
        RGBColor(0xd6, 0x27, 0x28),
        RGBColor(0xff, 0x7f, 0x0e),
        RGBColor(0x8c, 0x56, 0x4b),
        RGBColor(0x94, 0x67, 0xbd),
        RGBColor(0x17, 0xbe, 0xcf),
        RGBColor(0x2c, 0xa0, 0x2c),
        RGBColor(0xbc, 0xbd, 0x22),
        RGBColor(0x1f, 0x77, 0xb4),
        RGBColor(0x7f, 0x7f, 0x7f),
    ];
    let xr = (xmin / 1.3)..(xmax * 1.3);
    for (panel, area) in [(0, &left), (1, &right)] {
        let (ylo, yhi, desc, caption) = if panel == 0 {
            (wmin / 2.0, wmax * 2.0, "wall (s)", "wall time")
        } else {
            (
                BYTES_FLOOR_MIB / 2.0,
                bmax * 2.0,
                "written at the device (MiB)",
                "bytes written",
            )
        };
        let mut chart = ChartBuilder::on(area)
            .caption(caption, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(xr.clone().log_scale(), (ylo..yhi).log_scale())
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc("parent size (GiB, uncompressed Data.db)")
            .y_desc(desc)
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| {
                if *y >= 1.0 {
                    format!("{y:.0}")
                } else {
                    format!("{y:.3}")
                }
            })
            .draw()
            .map_err(|e| err(&e))?;
        for (i, (_, pts)) in series.iter().enumerate() {
            let color = colors[i % colors.len()];
            let data: Vec<(f64, f64)> = pts
                .iter()
                .map(|&(x, w, b)| {
                    (
                        x,
                        if panel == 0 {
                            w.max(1e-3)
                        } else {
                            b.max(BYTES_FLOOR_MIB)
                        },
                    )
                })
                .collect();
            chart
                .draw_series(LineSeries::new(data.clone(), color.stroke_width(2)))
                .map_err(|e| err(&e))?;
            chart
                .draw_series(data.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(|e| err(&e))?;
        }
    }
    // One legend for both panels, beside them.
    for (i, (name, _)) in series.iter().enumerate() {
        let color = colors[i % colors.len()];
        let y = 80 + 24 * i as i32;
        legend
            .draw(&PathElement::new(
                vec![(8, y), (34, y)],
                color.stroke_width(3),
            ))
            .map_err(|e| err(&e))?;
        legend
            .draw(&Text::new(*name, (42, y - 7), ("sans-serif", 13)))
            .map_err(|e| err(&e))?;
    }
    let y = 80 + 24 * series.len() as i32 + 10;
    for (k, line) in [
        "0 bytes written (a pure reflink)",
        "is drawn at 4 KiB.",
        "Wall includes a syncfs of the",
        "output filesystem after exit.",
    ]
    .iter()
    .enumerate()
    {
        legend
            .draw(&Text::new(
                *line,
                (8, y + 16 * k as i32),
                ("sans-serif", 12),
            ))
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
