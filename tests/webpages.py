"""Pages for the web_fetch tests, made here: a documentation page as Sphinx writes it (the Python
docs' json.html, cut down) and hostile pages that once froze the daemon or still make trafilatura
slow."""

from __future__ import annotations

SPHINX_JSON = """<!DOCTYPE html>
<html lang="en" data-content_root="../">
<head><meta charset="utf-8" />
<title>json — JSON encoder and decoder &#8212; Python 3.12.2 documentation</title>
<link rel="stylesheet" type="text/css" href="../_static/pygments.css" /></head>
<body>
<div class="related" role="navigation" aria-label="Related"><h3>Navigation</h3><ul>
<li class="right"><a href="../genindex.html" title="General Index" accesskey="I">index</a></li>
<li class="right"><a href="mailbox.html" accesskey="N">next</a> |</li></ul></div>
<div class="document"><div class="documentwrapper"><div class="bodywrapper">
<div class="body" role="main">
<section id="module-json">
<span id="json-json-encoder-and-decoder"></span><h1><a class="reference internal" \
href="#module-json" title="json: Encode and decode the JSON format."><code class="xref py py-mod \
docutils literal notranslate"><span class="pre">json</span></code></a> — JSON encoder and \
decoder<a class="headerlink" href="#module-json" title="Link to this heading">¶</a></h1>
<p><strong>Source code:</strong> <a class="reference external" \
href="https://github.com/python/cpython/tree/3.12/Lib/json/__init__.py">Lib/json/__init__.py</a></p>
<p><a class="reference external" href="https://json.org">JSON (JavaScript Object Notation)</a>, \
specified by RFC 7159 and by ECMA-404, is a lightweight data interchange format inspired by \
JavaScript object literal syntax (although it is not a strict subset of JavaScript).</p>
<p><a class="reference internal" href="#module-json"><code class="xref py py-mod docutils literal \
notranslate"><span class="pre">json</span></code></a> exposes an API familiar to users of the \
standard library <a class="reference internal" href="marshal.html#module-marshal">\
<code class="xref py py-mod docutils literal notranslate"><span class="pre">marshal</span>\
</code></a> and <a class="reference internal" href="pickle.html#module-pickle">\
<code class="xref py py-mod docutils literal notranslate"><span class="pre">pickle</span>\
</code></a> modules; the \
<a class="reference internal" href="../glossary.html#term-file-like-object">glossary</a> says \
what a file-like object is.</p>
<p>Encoding basic Python object hierarchies:</p>
<div class="highlight-python3 notranslate"><div class="highlight"><pre><span></span>\
<span class="gp">&gt;&gt;&gt; </span><span class="kn">import</span> <span class="nn">json</span>
<span class="gp">&gt;&gt;&gt; </span><span class="n">json</span><span class="o">.</span>\
<span class="n">dumps</span><span class="p">([</span><span class="s1">&#39;foo&#39;</span>\
<span class="p">])</span>
<span class="go">&#39;[&quot;foo&quot;]&#39;</span>
</pre></div></div>
<section id="basic-usage">
<h2>Basic Usage<a class="headerlink" href="#basic-usage" title="Link to this heading">¶</a></h2>
<dl class="py function">
<dt class="sig sig-object py" id="json.dump"><span class="sig-prename descclassname">\
<span class="pre">json.</span></span><span class="sig-name descname"><span class="pre">dump</span>\
</span><span class="sig-paren">(</span><em class="sig-param"><span class="n"><span class="pre">obj\
</span></span></em>, <em class="sig-param"><span class="n"><span class="pre">fp</span></span></em>\
<span class="sig-paren">)</span><a class="headerlink" href="#json.dump" \
title="Link to this definition">¶</a></dt>
<dd><p>Serialize <em>obj</em> as a JSON formatted stream to <em>fp</em>, a file-like object \
that supports writing, using the conversion table of this module:</p>
<div class="highlight-python3 notranslate"><div class="highlight"><pre><span></span>\
<span class="k">with</span> <span class="nb">open</span><span class="p">(</span>\
<span class="s2">&quot;out.json&quot;</span><span class="p">,</span> \
<span class="s2">&quot;w&quot;</span><span class="p">)</span> <span class="k">as</span> \
<span class="n">fp</span><span class="p">:</span>
    <span class="n">json</span><span class="o">.</span><span class="n">dump</span>\
<span class="p">({</span><span class="s2">&quot;a&quot;</span><span class="p">:</span> \
<span class="mi">1</span><span class="p">},</span> <span class="n">fp</span><span class="p">)\
</span>
</pre></div></div>
</dd></dl>
</section>
</section>
</div></div></div></div>
</body></html>
"""

MB2 = 2_000_000


def repeated(unit: str, size: int = MB2, *, head: str = "<html><body>") -> bytes:
    """`unit` over and over after `head`, `size` bytes in all."""
    body = unit * ((size - len(head)) // len(unit) + 1)
    return (head + body)[:size].encode()


UNCLOSED_SCRIPTS = repeated("<script ")  # the regex fallback's quadratic case (80 KB: 15 s)
OPEN_BRACKETS = repeated("<", head="<html><body><p>visible words ")  # `<[^>]+>` (40 KB: 9.9 s)
SLOW_FOR_TRAFILATURA = repeated("<div><p>a b c d e</p></div>")  # minutes of CPU in trafilatura
