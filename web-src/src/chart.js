// uPlot wrapper: sized to its box, redrawn on resize; x values are UTC seconds labelled by the caller (device zone).
import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';
import { html } from './ui.js';

export function Chart({ opts, data, label }) {
  const box = useRef(null);
  useEffect(() => {
    const el = box.current;
    const width = () => Math.max(200, el.clientWidth);
    const plot = new uPlot({ ...opts, width: width(), height: opts.height || 220 }, data, el);
    const ro = new ResizeObserver(() => plot.setSize({ width: width(), height: opts.height || 220 }));
    ro.observe(el);
    return () => {
      ro.disconnect();
      plot.destroy();
    };
  }, [opts, data]);
  return html`<figure class="chart" role="img" aria-label=${label}><div ref=${box}></div></figure>`;
}

export const bars = uPlot.paths.bars({ size: [0.7, 60] });
export const noPoints = { show: false };
export const steps = uPlot.paths.stepped({ align: 1 });
