"""A correct solution written independently of the reference, from the notebook's contract alone: the report's
similarity check must not pair it with the reference, and grading must give it full marks.

`independent()` is the solution notebook with each solution region's body replaced, in order, by the bodies
below (the regions keep their markers, so nbgrader's release and grading see the usual cells).
"""

import re
import tempfile
from pathlib import Path

import nbformat

from specdec_course.core.nbgrader_course import BEGIN_SOLUTION, END_SOLUTION
from specdec_course.selftest.catalogue import Entry, make_submission

from conftest import SOLUTION

BODIES = [
    # SpeculativeDecoder.__init__
    """\
tm, tt = self.initialize_target_model(target_model_name)
dm, dt = self.initialize_draft_model(draft_model_name)
check_same_vocab(tt, dt, target_model_name, draft_model_name)
self.target_model, self.target_tokenizer, self.draft_model, self.draft_tokenizer = tm, tt, dm, dt
""",
    # initialize_target_model
    """\
where, extra = model_source(model_name)
tok = AutoTokenizer.from_pretrained(where, **extra)
tok.pad_token = tok.pad_token or tok.eos_token
net = AutoModelForCausalLM.from_pretrained(where, **{**extra, **dtype_kwargs(self.dtype)})
net.to(self.device)
net.eval()
return net, tok
""",
    # initialize_draft_model
    """\
pair = self.initialize_target_model(model_name)
return pair
""",
    # generate_draft_tokens
    """\
seq = input_ids
for step in range(num_speculative_tokens):
    scores = self.draft_model(seq, attention_mask=torch.ones_like(seq)).logits
    best = torch.argmax(scores[0, -1]).view(1, 1)
    seq = torch.cat((seq, best), dim=-1)
return seq[:, -num_speculative_tokens:]
""",
    # verify_tokens_vectorized
    """\
full = torch.cat((input_ids, draft_tokens), dim=-1)
out = self.target_model(full, attention_mask=torch.ones_like(full))
start = input_ids.size(1) - 1
return accept_drafts(out.logits[:, start:start + draft_tokens.size(1) + 1], draft_tokens)
""",
    # speculative_decode
    """\
ids = input_ids
out_tokens: list[int] = []
while True:
    room = max_tokens - len(out_tokens)
    if room <= 0:
        break
    n_draft = min(num_speculative_tokens, room - 1)
    drafts = (self.generate_draft_tokens(ids, torch.ones_like(ids), n_draft) if n_draft
              else torch.zeros((1, 0), dtype=ids.dtype, device=ids.device))
    kept, n_ok, fix = self.verify_tokens_vectorized(ids, drafts, torch.ones_like(ids))
    this_round = kept[0].tolist() + fix[0].tolist()
    cut = next((j + 1 for j, t in enumerate(this_round) if t in eos_ids), len(this_round))
    out_tokens.extend(this_round[:cut])
    proposed.append(n_draft)
    accepted.append(min(n_ok, cut))
    self.rollback(ids.size(1) + n_ok)
    ids = torch.cat((ids, kept, fix), dim=-1)
    if cut < len(this_round) or this_round[-1] in eos_ids:
        break
new_tokens = out_tokens
""",
    # accept_drafts
    """\
guesses = logits[0].argmax(-1)  # (k+1,)
n = 0
while n < draft_tokens.size(1) and bool(guesses[n] == draft_tokens[0, n]):
    n += 1
return draft_tokens[:, :n], n, guesses[n].view(1, 1)
""",
    # truncate_at_eos
    """\
out = []
for t in tokens:
    out.append(t)
    if t in eos_ids:
        break
return out
""",
    # cached_prefix
    """\
kv, ids = self.caches[role]
if kv is None:
    return None, 0
n = ids.size(1)
if n > input_ids.size(1) or not torch.equal(ids[0], input_ids[0, :n]):
    return None, 0
if n == input_ids.size(1):
    n -= 1
    crop_to(kv, n)
    self.caches[role] = (kv, ids[:, :n])
return kv, n
""",
    # CachedSpeculativeDecoder.generate_draft_tokens
    """\
kv, have = self.cached_prefix("draft", input_ids)
if kv is None:
    kv = DynamicCache()
step_in = input_ids[:, have:]
picked = []
for _ in range(num_speculative_tokens):
    logits = self.draft_model(step_in, **cache_kwargs(kv), use_cache=True).logits
    step_in = logits[:, -1:].argmax(-1)
    picked.append(step_in)
result = torch.cat(picked, dim=-1)
self.caches["draft"] = (kv, torch.cat((input_ids, result[:, :-1]), dim=-1))
return result
""",
    # CachedSpeculativeDecoder.verify_tokens_vectorized
    """\
kv, have = self.cached_prefix("target", input_ids)
if kv is None:
    kv = DynamicCache()
whole = torch.cat((input_ids, draft_tokens), dim=-1)
logits = self.target_model(whole[:, have:], **cache_kwargs(kv), use_cache=True).logits
self.caches["target"] = (kv, whole)
offset = input_ids.size(1) - 1 - have
return accept_drafts(logits[:, offset:], draft_tokens)
""",
    # CachedSpeculativeDecoder.rollback
    """\
for name in list(self.caches):
    kv, ids = self.caches[name]
    if kv is None or ids.size(1) <= length:
        continue
    crop_to(kv, length)
    self.caches[name] = (kv, ids[:, :length])
""",
    # SpeculativeSampler.generate_draft_tokens
    """\
kv, have = self.cached_prefix("draft", input_ids)
pending, picked, dists = input_ids[:, have:], [], []
while len(picked) < num_speculative_tokens:
    res = self.draft_model(input_ids=pending, **cache_kwargs(kv), use_cache=True)
    kv = cache_of(res)
    dist = warp(res.logits[0, -1], self.temperature, self.top_p)
    pending = torch.multinomial(dist, num_samples=1, generator=self.generator).view(1, 1)
    picked.append(pending)
    dists.append(dist)
out = torch.cat(picked, dim=1)
self.draft_probs = torch.stack(dists).unsqueeze(0)
self.caches["draft"] = (kv, torch.cat([input_ids, out[:, :-1]], dim=1))
return out
""",
    # SpeculativeSampler.verify_tokens_vectorized
    """\
kv, have = self.cached_prefix("target", input_ids)
full = torch.cat([input_ids, draft_tokens], dim=1)
res = self.target_model(input_ids=full[:, have:], **cache_kwargs(kv), use_cache=True)
self.caches["target"] = (cache_of(res), full)
target_probs = warp(res.logits[:, input_ids.size(1) - 1 - have:], self.temperature, self.top_p)
return accept_sampled(target_probs, self.draft_probs, draft_tokens, self.generator)
""",
    # accept_sampled
    """\
n_draft, n = draft_tokens.size(1), 0
while n < n_draft:
    x = int(draft_tokens[0, n])
    if torch.rand((), generator=generator, device=p.device) > p[0, n, x] / q[0, n, x]:
        break
    n += 1
if n == n_draft:
    dist = p[0, n]
else:
    dist = (p[0, n] - q[0, n]).clamp(min=0)
    dist = dist / dist.sum()
return draft_tokens[:, :n], n, torch.multinomial(dist, 1, generator=generator).view(1, 1)
""",
    # PromptLookupDecoder.generate_draft_tokens
    """\
found = lookup_drafts(input_ids.view(-1).tolist(), num_speculative_tokens, self.max_ngram_size)
out = input_ids.new_zeros((1, len(found)))
out[0, :] = torch.as_tensor(found, dtype=input_ids.dtype)
return out
""",
    # lookup_drafts
    """\
size = min(max_ngram_size, len(ids) - 1)
while size >= 1:
    last = tuple(ids[len(ids) - size:])
    hits = [i for i in range(len(ids) - size) if tuple(ids[i:i + size]) == last]
    if hits:
        after = hits[-1] + size
        return list(ids[after:after + k])
    size -= 1
return []
""",
    # AdaptiveSpeculativeDecoder.generate_draft_tokens
    """\
kv, have = self.cached_prefix("draft", input_ids)
step, made = input_ids[:, have:], []
while len(made) < self.planned:
    res = self.draft_model(input_ids=step, **cache_kwargs(kv), use_cache=True)
    kv = cache_of(res)
    probs = torch.softmax(res.logits[0, -1].float(), dim=-1)
    step = probs.argmax().view(1, 1)
    made.append(step)
    if float(probs[step[0, 0]]) < self.confidence_threshold:
        break
out = torch.cat(made, dim=1)
self.caches["draft"] = (kv, torch.cat([input_ids, out[:, :-1]], dim=1))
return out
""",
    # AdaptiveSpeculativeDecoder.verify_tokens_vectorized: the counts
    """\
if not drafted:
    return accepted_tokens, n_accepted, next_token
if self.counted:
    checked = drafted if n_accepted == drafted else n_accepted + 1
    self.reached[:checked] = [n + 1 for n in self.reached[:checked]]
    if n_accepted < drafted:
        self.rejected[n_accepted] += 1
    self.k = next_k(self.reached, self.rejected, self.costs, self.max_k)
self.counted = n_accepted != drafted
""",
    # next_k
    """\
import itertools
import operator

n_seen, n_bad = sum(reached), sum(rejected)
a = (n_seen - n_bad + 2.25) / (n_seen + 3.0)
hazards = [(bad + 3.0 * (1 - a)) / (seen + 3.0) for seen, bad in zip(reached, rejected)]
alive = list(itertools.accumulate((1 - h for h in hazards[:max_k]), operator.mul))
per_second = [(1 + sum(alive[:k])) / (k * costs.draft + costs.verify[k]) for k in range(1, max_k + 1)]
return max(range(1, max_k + 1), key=lambda k: (per_second[k - 1], -k))
""",
]
_REGION = re.compile(rf"^([ \t]*){re.escape(BEGIN_SOLUTION)}\n.*?^[ \t]*{re.escape(END_SOLUTION)}", re.S | re.M)


def independent() -> nbformat.NotebookNode:
    """The independently written solution, handed in as a notebook (the report region kept as written)."""
    source = nbformat.read(SOLUTION, as_version=4)
    bodies = iter(BODIES)
    for cell in source.cells:
        if cell.cell_type == "code" and BEGIN_SOLUTION in cell.source:
            cell.source = _REGION.sub(lambda m: _indented(next(bodies), m.group(1)), cell.source)
    assert next(bodies, None) is None, "every body replaces one solution region"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / SOLUTION.name
        nbformat.write(source, path)
        return make_submission(path, Entry("independent", ""))


def _indented(body: str, indent: str) -> str:
    lines = "".join(f"{indent}{line}\n" if line else "\n" for line in body.splitlines())
    return f"{indent}{BEGIN_SOLUTION}\n{lines}{indent}{END_SOLUTION}"
