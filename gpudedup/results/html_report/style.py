"""report.html's style sheet: inline CSS, no fonts or resources to fetch."""

CSS = """
:root { --ink: #1f2933; --muted: #616e7c; --line: #e4e7eb; --soft: #f5f7fa; --blue: #0072b2;
        --orange: #e69f00; --red: #d55e00; --kept: #e3f2e8; --kept-line: #2f855a; }
* { box-sizing: border-box; }
html { -webkit-text-size-adjust: 100%; }
body { margin: 0; background: #fff; color: var(--ink);
       font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", "DejaVu Sans", Arial, sans-serif; }
main { max-width: 1120px; margin: 0 auto; padding: 32px 28px 48px; }
h1 { font-size: 28px; line-height: 1.2; margin: 0 0 4px; letter-spacing: -0.01em; }
h2 { font-size: 20px; margin: 40px 0 12px; padding-bottom: 6px; border-bottom: 2px solid var(--line); }
h3 { font-size: 16px; margin: 22px 0 8px; }
p { margin: 8px 0; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace; font-size: 0.9em;
              unicode-bidi: isolate; }
code { background: var(--soft); padding: 1px 5px; border-radius: 4px; }
.sub { color: var(--muted); margin: 0; }
.note { background: #fff8e6; border-left: 4px solid var(--orange); padding: 8px 12px; border-radius: 4px; }
details.note { margin: 12px 0; }
details.note summary { cursor: pointer; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(150px, 1fr)); gap: 12px; margin: 24px 0 8px; }
.card { border: 1px solid var(--line); border-radius: 8px; padding: 12px 16px; background: var(--soft); }
.card .value { font-size: 26px; font-weight: 700; font-variant-numeric: tabular-nums; line-height: 1.2; }
.card .label { color: var(--muted); font-size: 13px; text-transform: uppercase; letter-spacing: 0.04em; }
.card .detail { color: var(--muted); font-size: 13px; }
.grid2 { display: grid; grid-template-columns: repeat(auto-fit, minmax(380px, 1fr)); gap: 8px 32px; align-items: start; }
table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
caption { text-align: left; font-weight: 600; padding: 4px 0 6px; }
th, td { padding: 6px 10px; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top; }
thead th { font-size: 13px; color: var(--muted); font-weight: 600; border-bottom: 2px solid var(--line); }
td.num, th.num { text-align: right; white-space: nowrap; }
td.key { white-space: nowrap; font-weight: 600; }
td.why { color: var(--muted); font-size: 13.5px; }
tr.part td { color: var(--muted); font-size: 13.5px; }
tr.part td:first-child { padding-left: 28px; }
tr.total td { font-weight: 700; border-top: 2px solid var(--line); }
.bar { height: 10px; background: var(--blue); border-radius: 2px; min-width: 1px; }
.bar.busy { background: #9aa5b1; }
.rule { background: var(--soft); border-radius: 6px; padding: 10px 14px; }
.figures { display: grid; grid-template-columns: 1fr; gap: 28px; }
figure { margin: 0; max-width: 880px; }
figure svg { display: block; width: 100%; height: auto; border: 1px solid var(--line); border-radius: 6px; }
figcaption { color: var(--muted); font-size: 13.5px; margin-top: 6px; }
.cluster { border: 1px solid var(--line); border-radius: 8px; padding: 4px 18px 16px; margin: 18px 0; }
.cluster h3 { margin-top: 14px; }
.ids { color: var(--muted); font-size: 13.5px; overflow-wrap: anywhere; }
.docs { display: grid; grid-template-columns: repeat(auto-fit, minmax(280px, 1fr)); gap: 12px; margin-top: 10px;
        align-items: start; }
.doc { border: 1px solid var(--line); border-radius: 6px; padding: 10px 12px; background: #fff; min-width: 0; }
.doc.kept { background: var(--kept); border-color: var(--kept-line); }
.doc .head { font-size: 13px; margin-bottom: 6px; overflow-wrap: anywhere; }
.doc .tag { display: inline-block; font-size: 11.5px; font-weight: 700; text-transform: uppercase; letter-spacing: 0.05em;
            padding: 1px 7px; border-radius: 10px; margin-right: 6px; color: #fff; background: var(--red); }
.doc.kept .tag { background: var(--kept-line); }
.doc .sim { color: var(--muted); font-size: 13px; margin-bottom: 6px; }
.doc .text { white-space: pre-wrap; overflow-wrap: anywhere; font-size: 13.5px; line-height: 1.45; margin: 0;
             font-family: Georgia, "Times New Roman", "DejaVu Serif", serif; }
details.section { margin: 40px 0 0; }
details.section > summary { cursor: pointer; list-style-position: outside; margin-left: 18px; }
details.section > summary h2 { display: inline-block; margin: 0; border: 0; }
details.section[open] > summary { border-bottom: 2px solid var(--line); padding-bottom: 6px; margin-bottom: 12px; }
.doc.pair .tag { background: var(--blue); }
.doc .text.absent { color: var(--muted); font-style: italic; font-family: inherit; }
.balance { display: flex; height: 18px; border-radius: 4px; overflow: hidden; margin: 12px 0 6px;
           background: var(--line); }
.balance div { height: 100%; min-width: 2px; }
.swatch { display: inline-block; width: 11px; height: 11px; border-radius: 2px; margin-right: 6px;
          vertical-align: -1px; }
mark { background: #ffe08a; padding: 0 1px; border-radius: 2px; }
footer { margin-top: 40px; color: var(--muted); font-size: 13px; border-top: 1px solid var(--line); padding-top: 12px; }
@media print { main { max-width: none; padding: 0; } .cluster, figure { break-inside: avoid; } }
"""
