"""Headless Chromium for the status page's tests: run it, and compare two PNG screenshots pixel by
pixel in it (a canvas decodes both; no image library needed). The comparison is tolerant: a pixel
differs when a colour channel differs by more than :data:`CHANNEL`, and a page whose text moved or
changed differs in a large share of its pixels, a clock or a sparkline in a small one."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
from pathlib import Path

import pytest

#: A channel difference below this is antialiasing, not a change.
CHANNEL = 32

_COMPARE = """<!doctype html><html><body><pre id="result">pending</pre><script>
function load(src){return new Promise(function(ok,fail){var i=new Image();i.onload=function(){ok(i);};
i.onerror=function(){fail('cannot decode');};i.src=src;});}
function pixels(img){var c=document.createElement('canvas');c.width=img.naturalWidth;c.height=img.naturalHeight;
var g=c.getContext('2d');g.drawImage(img,0,0);return g.getImageData(0,0,c.width,c.height);}
var out=document.getElementById('result');
Promise.all([load('A'),load('B')]).then(function(imgs){var a=pixels(imgs[0]),b=pixels(imgs[1]);
if(a.width!==b.width||a.height!==b.height){out.textContent='size '+a.width+'x'+a.height+' '+b.width+'x'+b.height;
return;}var n=0,d=a.data,e=b.data;for(var k=0;k<d.length;k+=4){if(Math.abs(d[k]-e[k])>LIMIT||
Math.abs(d[k+1]-e[k+1])>LIMIT||Math.abs(d[k+2]-e[k+2])>LIMIT){n++;}}
out.textContent='differ '+n+' of '+(a.width*a.height);}).catch(function(err){out.textContent='error '+err;});
</script></body></html>"""


def chromium_path() -> str:
    found = shutil.which("chromium")
    if found is None:
        pytest.fail("chromium not found: scripts/test installs Debian's chromium package", pytrace=False)
    return found


def chromium(profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Headless Chromium with its own profile folder, nothing fetched besides what ``args`` name."""
    command = [
        chromium_path(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}", *args,
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=90, check=False)


def _data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


def differing_share(first: Path, second: Path, work: Path) -> float:
    """The share of pixels (0 to 1) that differ between two PNG files; 1.0 when their sizes differ."""
    work.mkdir(parents=True, exist_ok=True)
    page = work / "compare.html"
    html = _COMPARE.replace("LIMIT", str(CHANNEL)).replace("'A'", repr(_data_uri(first)))
    page.write_text(html.replace("'B'", repr(_data_uri(second))))
    run = chromium(work / "profile", "--virtual-time-budget=10000", "--dump-dom", page.as_uri())
    found = re.search(r'<pre id="result">([^<]*)</pre>', run.stdout)
    assert run.returncode == 0 and found is not None, run.stderr[-2000:]
    result = found.group(1)
    if result.startswith("size "):
        return 1.0
    counted = re.fullmatch(r"differ (\d+) of (\d+)", result)
    assert counted is not None, f"the comparison in Chromium said {result!r}"
    return int(counted.group(1)) / int(counted.group(2))
