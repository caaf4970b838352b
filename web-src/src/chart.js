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
  const [said, setSaid] = useState(''); // the value the keyboard is on, read out (aria-live)
  const [sum, setSum] = useState(''); // the text alternative: what the chart shows, in a sentence
  const at = useRef(-1);
  const [idx, setIdx] = useState(-1); // the same, for the page (data-i)
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
    at.current = -1;
    setIdx(-1);
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
  // A sentence for screen readers: each series' lowest and highest value as the chart's own labels write them.
  useEffect(() => {
    const p = plot.current;
    if (!p) return;
    const parts = [];
    p.series.forEach((s, k) => {
      const vals = k ? p.data[k].filter((v) => v !== null && v !== undefined) : [];
      if (vals.length) parts.push(t('chartRange', s.label, s.value(p, Math.min(...vals), k, 0), s.value(p, Math.max(...vals), k, 0)));
    });
    setSum(parts.join('; '));
  }, [data, opts]);
  const reset = () => plot.current.setScale('x', { min: full.current[0], max: full.current[1] });
  // The keyboard path: arrows, Home and End move the cursor from value to value and say each one.
  const keys = (e) => {
    const p = plot.current;
    const n = p ? p.data[0].length : 0;
    const step = { ArrowRight: 1, ArrowLeft: -1, Home: -n, End: n }[e.key];
    if (!n || !step) return;
    e.preventDefault();
    const from = at.current < 0 ? (step > 0 ? -1 : n) : at.current; // the first arrow goes to either end
    const i = Math.max(0, Math.min(n - 1, from + step));
    at.current = i;
    setIdx(i);
    p.setCursor({ left: p.valToPos(p.data[0][i], 'x'), top: 1 });
    setSaid(p.series.map((s, k) => s.label + ': ' + s.value(p, p.data[k][i], k, i)).join(' · '));
  };
  // The hint and the button sit outside the figure: role=img hides what is inside it from assistive technology.
  return html`<figure class="chart" role="img" tabindex="0" aria-label=${label + '. ' + sum + '. ' + t('chartKeys')} onKeyDown=${keys} data-test="chart" data-i=${idx}><div ref=${box}></div></figure>
    <p class="visually-hidden" aria-live="polite" data-test="chart-said">${said}</p>
    ${zoom && html`<p class="small zoom">${zoomed ? html`<button type="button" class="link" data-test="zoom-reset" onClick=${reset}>${t('zoomReset')}</button>` : t('zoomHint')}</p>`}`;
}

export const bars = uPlot.paths.bars({ size: [0.7, 60] });
export const noPoints = { show: false };
export const steps = uPlot.paths.stepped({ align: 1 });
