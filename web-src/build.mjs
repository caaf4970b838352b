// Build: bundle and minify the app (esbuild), inline JS and CSS into one HTML file, gzip it into ../web/ with a
// manifest (web/files.tsv: url, file, ETag, Content-Type, Cache-Control) that the firmware serves from.
// One file means one request per page load (a reload is one 304): the device's rate limit is 25 requests / 10 s.
import { build } from 'esbuild';
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, readdirSync, unlinkSync, writeFileSync } from 'node:fs';
import { gzipSync } from 'node:zlib';

const BUDGET = 66 * 1024; // the page, gzipped (issue 10; raised in issue 28 to 64 KB, then 66 KB with the token recovery, the restore endpoint and the money row, each with first-paint figures: docs/web.md)
const OUT = '../web';

// uPlot's helpers this page never calls (the spline path, join of data sets) are attached to uPlot as statics, which
// keeps them in the bundle: dropped here so the bundler leaves them out (issue 28: room in the size budget).
const UNUSED_UPLOT = ['\tuPlot.join = join;\n', '\t(paths.spline  = monotoneCubic);\n'];
const trimUplot = {
  name: 'trim-uplot',
  setup(b) {
    b.onLoad({ filter: /uPlot\.esm\.js$/ }, ({ path }) => {
      let text = readFileSync(path, 'utf8');
      for (const line of UNUSED_UPLOT) {
        if (!text.includes(line)) throw new Error('uPlot changed: ' + JSON.stringify(line) + ' not found');
        text = text.replace(line, '');
      }
      return { contents: text, loader: 'js' };
    });
  },
};

const js = await build({
  entryPoints: ['src/main.js'], bundle: true, minify: true, format: 'iife', target: ['es2020'], write: false,
  legalComments: 'none', logLevel: 'warning', plugins: [trimUplot],
});
const css = await build({
  stdin: { contents: '@import "uplot/dist/uPlot.min.css";\n@import "./src/style.css";', resolveDir: '.', loader: 'css' },
  bundle: true, minify: true, write: false, logLevel: 'warning',
});
const jsText = js.outputFiles[0].text.replace(/<\/script/gi, '<\\/script');
const cssText = css.outputFiles[0].text.replace(/<\/style/gi, '<\\/style');
const page = readFileSync('index.html', 'utf8').replace('/*CSS*/', () => cssText).replace('/*JS*/', () => jsText);
const gz = gzipSync(Buffer.from(page), { level: 9 }); // Node writes mtime 0: the same sources give the same bytes

mkdirSync(OUT, { recursive: true });
for (const f of readdirSync(OUT)) if (f !== 'README.md') unlinkSync(OUT + '/' + f);
writeFileSync(OUT + '/index.html.gz', gz);
const etag = '"' + createHash('sha256').update(gz).digest('hex').slice(0, 16) + '"';
// The page's Content-Security-Policy: its one inline script and style by hash (a script injected any other way,
// or from elsewhere, does not run), API calls to the device only, and no framing by any site (clickjacking).
const b64sha = (text) => createHash('sha256').update(text, 'utf8').digest('base64');
const csp = [
  // 'strict-dynamic': a script the hashed one adds (web/money.js, loaded when the money view opens) may run too.
  "default-src 'none'", `script-src 'sha256-${b64sha(jsText)}' 'strict-dynamic'`, `style-src 'sha256-${b64sha(cssText)}'`,
  "img-src 'self' data: blob:", "connect-src 'self'", "base-uri 'none'", "form-action 'self'", "frame-ancestors 'none'",
].join('; ');
// The money view (issue 29): a file of its own, loaded only when the view opens; its own budget.
const MONEY_BUDGET = 8 * 1024;
const money = await build({
  entryPoints: ['src/money.js'], bundle: true, minify: true, format: 'iife', target: ['es2020'], write: false,
  legalComments: 'none', logLevel: 'warning',
});
const moneyGz = gzipSync(Buffer.from(money.outputFiles[0].text), { level: 9 });
writeFileSync(OUT + '/money.js.gz', moneyGz);
const moneyEtag = '"' + createHash('sha256').update(moneyGz).digest('hex').slice(0, 16) + '"';
writeFileSync(OUT + '/files.tsv', `/\tindex.html.gz\t${etag}\ttext/html; charset=utf-8\tno-cache\t${csp}\n` +
  `/money.js\tmoney.js.gz\t${moneyEtag}\ttext/javascript; charset=utf-8\tno-cache\n`);
console.log(`web/money.js.gz: ${moneyGz.length} bytes gzipped (js ${money.outputFiles[0].text.length}), ETag ${moneyEtag}`);
if (moneyGz.length > MONEY_BUDGET) {
  console.error(`money.js over its budget of ${MONEY_BUDGET} bytes gzipped`);
  process.exit(1);
}

const sizes = { js: jsText.length, css: cssText.length, html: page.length, gzip: gz.length };
console.log(`web/index.html.gz: ${gz.length} bytes gzipped (html ${page.length}, js ${sizes.js}, css ${sizes.css}), ETag ${etag}`);
if (gz.length > BUDGET) {
  console.error(`over the budget of ${BUDGET} bytes gzipped`);
  process.exit(1);
}
