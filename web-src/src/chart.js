// uPlot wrapper: sized to its box, redrawn on resize; x values are UTC seconds labelled by the caller (device zone).
// Dragging across a chart zooms into that span (uPlot's own cursor drag); the caption says so and, once zoomed,
// offers to show everything again.
import { useEffect, useRef, useState } from 'preact/hooks';
import uPlot from 'uplot';
import { t } from './i18n.js';
import { html } from './ui.js';

export function Chart({ opts, data, label, zoom = true }) {
  const box = useRef(null);
  const plot = useRef(null);
  const full = useRef(null);
  const [zoomed, setZoomed] = useState(false);
  useEffect(() => {
    const el = box.current;
    const width = () => Math.max(200, el.clientWidth);
    // The first x range uPlot sets for new data is "everything"; a narrower one later is a zoom.
    const onScale = (u, key) => {
      if (key !== 'x') return;
      if (!full.current) full.current = [u.scales.x.min, u.scales.x.max];
      else setZoomed(u.scales.x.min > full.current[0] || u.scales.x.max < full.current[1]);
    };
    full.current = null;
    const p = new uPlot({ ...opts, width: width(), height: opts.height || 220, hooks: { setScale: [onScale] } }, data, el);
    plot.current = p;
    setZoomed(false);
    const ro = new ResizeObserver(() => p.setSize({ width: width(), height: opts.height || 220 }));
    ro.observe(el);
    return () => {
      ro.disconnect();
      p.destroy();
      plot.current = null;
    };
  }, [opts]);
  // New values for the same chart (the dashboard's live power): no new plot, the zoom stays.
  useEffect(() => {
    if (plot.current && plot.current.data !== data) {
      if (!zoomed) full.current = null;
      plot.current.setData(data, !zoomed);
    }
  }, [data]);
  const reset = () => plot.current.setScale('x', { min: full.current[0], max: full.current[1] });
  // The hint and the button sit outside the figure: role=img hides what is inside it from assistive technology.
  return html`<figure class="chart" role="img" aria-label=${label}><div ref=${box}></div></figure>
    ${zoom && html`<p class="small zoom">${zoomed ? html`<button type="button" class="link" data-test="zoom-reset" onClick=${reset}>${t('zoomReset')}</button>` : t('zoomHint')}</p>`}`;
}

export const bars = uPlot.paths.bars({ size: [0.7, 60] });
export const noPoints = { show: false };
export const steps = uPlot.paths.stepped({ align: 1 });
