"""Known student bugs and correct variants, for `specdec-course selftest`.

Each entry is the reference solution with `edits` (exact (old, new) replacements, each found once in the
solution's code), its `kind` (a student's `bug`, or a `variant`: correct code written differently, which loses
only what its description says it gives up) and `fails`, the graded tests it must lose points on; every other
auto-graded test must give full marks. `specdec-course catalogue --losses NAME` prints which tests an entry loses
before its `fails` is written. `message` is text of the check's verdict that the student's feedback page must
show; a bug's `messages` give, for each test it loses (the speed test's timing aside), the words that test's
message must hold: the cause where the test can see it, else what it saw of it. A round that emits no token has one
of two causes, named in `specdec_kit.core.no_progress.CAUSE_WORDS`' words (a verifier's slice that starts one
position late, or a target's token dropped): a bug's messages name its own, and its tests' messages never the other
(tests/course/selftest/test_catalogue.py). Bugs come from the course's three student reports; `slow_rounds` stands
in for any slowness the checks cannot see.

test_speedup: decoders with working caches measure well above the bar of 0.75x HF assisted generation
(autograder/config.toml) and `slow_rounds` well below it, as the selftest's `speed` column shows
(docs/benchmarks.md keeps the measured ratios). Bugs that break the round count, the output or the caches' use lose
it untimed, whatever prompts a run's timing draws.
"""
TARGET_FORWARD = ("        out = self.target_model(input_ids=sequence[:, cached:], **cache_kwargs(cache), "
                  "use_cache=True)\n")

UNCACHED_VERIFY = "        return accept_drafts(logits[:, input_ids.shape[1] - 1:, :], draft_tokens)\n"
DRAFT_ARGMAX = "            next_token = logits[:, -1, :].argmax(dim=-1, keepdim=True)  # (1, 1), stays on the device\n"
SAMPLED_ACCEPT = "        return accept_sampled(p, q, draft_tokens, self.generator)\n"
LOOKUP_STARTS = ("        for start in range(len(ids) - n - 1, -1, -1):  # latest first; start = len(ids) - n is the "
                 "tail itself\n")
ROLLBACK_CROP = ("                crop_to(cache, length)\n"
                 "                self.caches[role] = (cache, held[:, :length])\n")

CATALOGUE = [
    # --- bugs -------------------------------------------------------------------------------------
    {
        "name": "off_by_one_late",
        "kind": "bug",
        "description": "draft i compared with the logit at position L+i instead of L-1+i",
        "edits": [(UNCACHED_VERIFY,
                   "        return accept_drafts(logits[:, input_ids.shape[1]:, :], draft_tokens)\n")],
        "fails": ["test_verify_alignment", "test_correction_and_bonus", "test_exact", "test_eos_and_budget",
                  "test_counts"],
        "message": "your verifier said",
        "messages": {"test_verify_alignment": "L+i (one late)",
                     "test_correction_and_bonus": "must be the target's own token",
                     **dict.fromkeys(["test_exact", "test_eos_and_budget", "test_counts"],
                                     "starts one position late, at L instead of L-1")},
    },
    {
        "name": "off_by_one_early",
        "kind": "bug",
        "description": "draft i compared with the logit at position L-2+i",
        "edits": [(UNCACHED_VERIFY,
                   "        return accept_drafts(logits[:, input_ids.shape[1] - 2:, :], draft_tokens)\n")],
        "fails": ["test_verify_alignment", "test_correction_and_bonus", "test_exact", "test_eos_and_budget",
                  "test_counts"],
        "message": "your verifier said",
        "messages": {"test_verify_alignment": "L-2+i (one early)",
                     "test_correction_and_bonus": "must be the target's own token",
                     "test_exact": "Check the acceptance rule", "test_eos_and_budget": "The tokens part before EOS",
                     "test_counts": "more rounds than correct decoding takes"},
    },
    {
        "name": "no_bonus_token",
        "kind": "bug",
        "description": "after a full acceptance no bonus token is added",
        "edits": [("    return draft_tokens[:, :n_accepted], n_accepted, predicted[:, n_accepted:n_accepted + 1]\n",
                   "    bonus_or_correction = predicted[:, n_accepted:n_accepted + 1] if n_accepted < k or k == 0 "
                   "else predicted[:, :0]\n"
                   "    return draft_tokens[:, :n_accepted], n_accepted, bonus_or_correction\n")],
        # The tokens stay right (a missing bonus costs a round, not a token) and the caches stay valid.
        "fails": ["test_correction_and_bonus", "test_counts", "test_speedup", "test_lookup", "test_adaptive"],
        "message": "next_token is the bonus token",
        "messages": {"test_correction_and_bonus": "next_token is the bonus token",
                     "test_counts": "add the target's own token", "test_lookup": "drops the bonus token",
                     "test_adaptive": "the bonus token after a full acceptance"},
    },
    {
        "name": "no_bonus_token_in_loop",
        "kind": "bug",
        "description": "the loop appends the target's token only after a rejection, so a round with no room "
                       "for drafts adds nothing and the decode never ends",
        "edits": [("            round_tokens = torch.cat([accepted_tokens, next_token], dim=1)\n",
                   "            round_tokens = (torch.cat([accepted_tokens, next_token], dim=1) if n_accepted < k\n"
                   "                            else accepted_tokens)\n"),
                  ("            if emitted[-1] in eos_ids:\n", "            if emitted and emitted[-1] in eos_ids:\n")],
        "fails": ["test_exact", "test_eos_and_budget", "test_counts", "test_cached_exact", "test_cache_use",
                  "test_speedup", "test_sampling", "test_lookup", "test_adaptive"],
        "message": "a round that emits no token",
        "messages": dict.fromkeys(["test_exact", "test_eos_and_budget", "test_counts", "test_cached_exact",
                                   "test_cache_use", "test_sampling", "test_lookup", "test_adaptive"],
                                  "the loop drops the target's own token"),
    },
    {
        "name": "accepted_past_eos",
        "kind": "bug",
        "description": "accepted counts every accepted draft, also those cut off after an EOS among them",
        "edits": [("            accepted.append(min(n_accepted, len(emitted)))\n",
                   "            accepted.append(n_accepted)\n")],
        "fails": ["test_counts"],
        "message": "accepted counts those up to and including it",
        "messages": {"test_counts": "accepted counts those up to and including it"},
    },
    {
        "name": "no_room_round_uncounted",
        "kind": "bug",
        "description": "a round with no room for drafts is not counted as a round",
        "edits": [("            proposed.append(draft_tokens.shape[1])  # k, or fewer where a subclass drafts fewer\n"
                   "            accepted.append(min(n_accepted, len(emitted)))\n",
                   "            if k > 0:\n                proposed.append(k)\n"
                   "                accepted.append(min(n_accepted, len(emitted)))\n")],
        "fails": ["test_counts"],
        "message": "still counts as a round",
        "messages": {"test_counts": "still counts as a round"},
    },
    {
        "name": "tokens_after_eos",
        "kind": "bug",
        "description": "tokens after an EOS inside the accepted draft are kept",
        "edits": [("            return tokens[:i + 1]\n", "            return tokens\n")],
        "fails": ["test_eos_and_budget"],
        "message": "EOS inside an accepted draft",
        "messages": {"test_eos_and_budget": "Emit EOS and nothing after it"},
    },
    {
        "name": "budget_overrun",
        "kind": "bug",
        "description": "always k drafts, so the last round overruns max_tokens",
        "edits": [("            k = min(num_speculative_tokens, max_tokens - len(new_tokens) - 1)\n",
                   "            k = num_speculative_tokens\n")],
        "fails": ["test_exact", "test_eos_and_budget", "test_counts", "test_cached_exact", "test_cache_use",
                  "test_speedup", "test_sampling", "test_lookup", "test_adaptive"],
        "message": "a budget that ends mid-draft",
        "messages": {**dict.fromkeys(["test_exact", "test_cached_exact", "test_cache_use", "test_lookup",
                                     "test_adaptive"], "too many tokens"),
                     "test_eos_and_budget": "never more than max_tokens",
                     "test_counts": "propose no more drafts than the budget leaves room for",
                     "test_sampling": "every sample must have 3 tokens"},
    },
    {
        "name": "eos_anywhere",
        "kind": "bug",
        "description": "stops when EOS appears anywhere in input_ids, so a prompt holding EOS stops at once",
        "edits": [("            if emitted[-1] in eos_ids:\n",
                   "            if any(token in eos_ids for token in input_ids[0].tolist()):\n")],
        "fails": ["test_eos_and_budget"],
        "message": "an EOS inside the prompt must not stop decoding",
        "messages": {"test_eos_and_budget": "an EOS inside the prompt must not stop decoding"},
    },
    {
        "name": "sampled_draft",
        "kind": "bug",
        "description": "the draft samples from its distribution while verification is greedy",
        "edits": [(DRAFT_ARGMAX,
                   "            next_token = torch.multinomial(logits[:, -1, :].float().softmax(dim=-1), 1)\n")],
        "fails": ["test_draft_tokens", "test_counts"],
        "message": "do not sample",
        "messages": {"test_draft_tokens": "do not sample", "test_counts": "more rounds than correct decoding takes"},
    },
    {
        "name": "bonus_counted_as_accepted",
        "kind": "bug",
        "description": "the target's own token is counted among the accepted drafts",
        "edits": [("            accepted.append(min(n_accepted, len(emitted)))\n",
                   "            accepted.append(len(emitted))\n")],
        "fails": ["test_counts"],
        "message": "Count accepted drafts only",
        "messages": {"test_counts": "Count accepted drafts only"},
    },
    {
        # from_pretrained already returns a model in eval mode, so only an explicit train() breaks this.
        "name": "train_mode",
        "kind": "bug",
        "description": "models put in training mode (dropout on)",
        "edits": [("        return model.to(self.device).eval(), tokenizer\n",
                   "        return model.to(self.device).train(), tokenizer\n")],
        "fails": ["test_loading"],
        "message": "training mode: call .eval()",
        "messages": {"test_loading": "training mode: call .eval()"},
    },
    {
        "name": "no_pad_token",
        "kind": "bug",
        "description": "no pad token set for a tokenizer that has none (Pythia, GPT-2, the zoo)",
        "edits": [("            tokenizer.pad_token = tokenizer.eos_token\n", "            pass\n")],
        "fails": ["test_loading"],
        "message": "has no pad token",
        "messages": {"test_loading": "has no pad token"},
    },
    {
        "name": "cache_not_cropped",
        "kind": "bug",
        "description": "the KV caches keep rejected drafts",
        "edits": [(ROLLBACK_CROP,
                   "                pass  # the caches keep everything\n"),
                  ("        if cache is None or common_prefix_length(held, input_ids) < held.shape[1]:\n"
                   "            return None, 0\n",
                   "        if cache is None:\n            return None, 0\n"
                   "        return cache, min(common_prefix_length(held, input_ids), input_ids.shape[1] - 1)\n")],
        "fails": ["test_cached_exact", "test_cache_use", "test_sampling", "test_lookup", "test_adaptive",
                  "test_speedup"],
        "message": "still held a rejected draft token",
        "messages": {**dict.fromkeys(["test_cached_exact", "test_lookup"], "cache held more positions than the text"),
                     **dict.fromkeys(["test_cache_use", "test_sampling", "test_adaptive", "test_speedup"],
                                     "still held a rejected draft token")},
    },
    {
        "name": "cache_of_another_text",
        "kind": "bug",
        "description": "cached_prefix uses whatever cache there is, without checking that it holds a prefix of "
                       "input_ids",
        "edits": [("        if cache is None or common_prefix_length(held, input_ids) < held.shape[1]:\n",
                   "        if cache is None:\n")],
        "fails": ["test_cache_use"],
        "message": "the draft's cache held the other text",
        "messages": {"test_cache_use": "the draft's cache held the other text"},
    },
    {
        "name": "rollback_skipped",
        "kind": "bug",
        "description": "nothing is rolled back after a rejection, so the next round finds no usable cache",
        "edits": [(ROLLBACK_CROP,
                   "                pass  # nothing rolled back\n")],
        # Timed, it measured 0.64-0.91x against the bar of 0.75x: too close to call, so the speed test's first check
        # judges the caches' use before any timing.
        "fails": ["test_cache_use", "test_speedup", "test_sampling", "test_adaptive"],
        "message": "started from an empty cache",
        "messages": dict.fromkeys(["test_cache_use", "test_sampling", "test_adaptive", "test_speedup"],
                                  "started from an empty cache"),
    },
    {
        "name": "prefix_reencoded",
        "kind": "bug",
        "description": "the cached class throws its caches away and re-encodes the prefix every round",
        "edits": [("        return cache, held.shape[1]\n", "        return None, 0\n")],
        "fails": ["test_cache_use", "test_speedup", "test_sampling", "test_adaptive"],
        "message": "started from an empty cache",
        "messages": dict.fromkeys(["test_cache_use", "test_sampling", "test_adaptive", "test_speedup"],
                                  "started from an empty cache"),
    },
    {
        "name": "slow_rounds",
        "kind": "bug",
        "description": "correct, with working caches, but each round then computes four times the matrix products "
                       "of its target forward (of the target's width and layers, on as many positions): a stand-in "
                       "for work that no check sees, slow in CPU as a real slow decoder is, wherever its forwards run "
                       "and whatever the clocks say",
        "edits": [(TARGET_FORWARD,
                   TARGET_FORWARD +
                   "        width = self.target_model.config.hidden_size\n"
                   "        work, weight = torch.ones(sequence.shape[1] - cached, width), torch.eye(width)\n"
                   "        for _ in range(4 * 12 * self.target_model.config.num_hidden_layers):  # 12 width^2 each\n"
                   "            work = work @ weight\n")],
        "fails": ["test_speedup"],
        "message": "the speed of HF assisted generation",
    },
    {
        "name": "extra_target_forward",
        "kind": "bug",
        "description": "on a rejection the correction comes from a second target forward",
        "edits": [(UNCACHED_VERIFY,
                   "        predicted_logits = logits[:, input_ids.shape[1] - 1:, :]\n"
                   "        accepted, n, next_token = accept_drafts(predicted_logits, draft_tokens)\n"
                   "        if n < draft_tokens.shape[1]:\n"
                   "            prefix = torch.cat([input_ids, accepted], dim=1)\n"
                   "            next_token = self.target_model(input_ids=prefix).logits[:, -1:, :].argmax(dim=-1)\n"
                   "        return accepted, n, next_token\n")],
        "fails": ["test_verify_alignment", "test_correction_and_bonus", "test_counts"],
        "message": "verification made 2 target forward passes",
        "messages": {**dict.fromkeys(["test_verify_alignment", "test_correction_and_bonus"],
                                    "verification made 2 target forward passes"),
                     "test_counts": "a round makes more than one target forward"},
    },
    {
        "name": "target_does_all_work",
        "kind": "bug",
        "description": "target.generate dressed up as speculation",
        "edits": [("        while len(new_tokens) < max_tokens:\n",
                   "        out = self.target_model.generate(input_ids, attention_mask=attention_mask,\n"
                   "                                         max_new_tokens=max_tokens, do_sample=False)\n"
                   "        new_tokens = out[0, input_ids.shape[1]:].tolist()\n"
                   "        proposed, accepted = [len(new_tokens)], [len(new_tokens)]\n"
                   "        while False:\n")],
        # generate's own cache is kept and never re-sent, so test_cache_use passes: counts and speed catch it,
        # and the sampler, whose loop this is, samples nothing.
        "fails": ["test_counts", "test_speedup", "test_sampling", "test_lookup", "test_adaptive"],
        "message": "target forward passes for a decode that takes",
        "messages": {"test_counts": "the target is doing the drafts' work", "test_adaptive": "the kit saw 0",
                     "test_lookup": "but the kit saw",
                     "test_sampling": "does not follow the target's warped distribution"},
    },
    {
        "name": "draft_ignored",
        "kind": "bug",
        "description": "the draft runs but its tokens are thrown away",
        "edits": [("        return ids[:, input_ids.shape[1]:]\n",
                   "        return torch.zeros_like(ids[:, input_ids.shape[1]:])\n")],
        "fails": ["test_draft_tokens", "test_counts"],
        "message": "expected the draft model's greedy choice",
        "messages": {"test_draft_tokens": "expected the draft model's greedy choice",
                     "test_counts": "more rounds than correct decoding takes"},
    },
    # --- the bonus: speculative sampling ------------------------------------------------------------
    {
        "name": "sampler_verifies_greedily",
        "kind": "bug",
        "description": "sampled drafts checked greedily: kept only where they equal the target's argmax",
        "edits": [(SAMPLED_ACCEPT, "        return accept_drafts(p, draft_tokens)\n")],
        "fails": ["test_sampling"],
        "message": "the drafts are verified greedily",
        "messages": {"test_sampling": "the drafts are verified greedily"},
    },
    {
        "name": "sampler_residual_forgotten",
        "kind": "bug",
        "description": "after a rejection the target's token is sampled from p, not from the residual max(0, p - q)",
        "edits": [("        distribution = residual / residual.sum()\n", "        distribution = p[0, n_accepted]\n")],
        "fails": ["test_sampling"],
        "message": "sample from the residual",
        "messages": {"test_sampling": "sample from the residual"},
    },
    {
        "name": "sampler_bonus_from_draft",
        "kind": "bug",
        "description": "after a full acceptance the bonus token is sampled from the draft's q, not the target's p",
        "edits": [("        distribution = p[0, k]\n", "        distribution = q[0, k - 1] if k else p[0, 0]\n")],
        "fails": ["test_sampling"],
        "message": "never from the draft's q",
        "messages": {"test_sampling": "never from the draft's q"},
    },
    {
        "name": "sampler_draft_cache_rebuilt",
        "kind": "bug",
        "description": "the sampler's drafting starts a new draft cache every round instead of cropping the old one",
        "edits": [("        draft_cache, held = self.cached_prefix(\"draft\", input_ids)\n"
                   "        step_ids, tokens, rows = input_ids[:, held:], [], []\n",
                   "        draft_cache, held = None, 0  # a new draft cache every round\n"
                   "        step_ids, tokens, rows = input_ids[:, held:], [], []\n")],
        "fails": ["test_sampling"],
        "message": "started from an empty cache",
        "messages": {"test_sampling": "started from an empty cache"},
    },
    # --- the bonus: prompt lookup -------------------------------------------------------------------
    {
        "name": "lookup_matches_itself",
        "kind": "bug",
        "description": "the n-gram search includes the last n tokens themselves, after which nothing follows, so "
                       "lookup never proposes a draft",
        "edits": [(LOOKUP_STARTS, "        for start in range(len(ids) - n, -1, -1):\n")],
        "fails": ["test_lookup"],
        "message": "are not an earlier occurrence",
        "messages": {"test_lookup": "are not an earlier occurrence"},
    },
    {
        "name": "lookup_proposes_the_match",
        "kind": "bug",
        "description": "lookup proposes the matched n-gram itself instead of the tokens that follow it",
        "edits": [("                return ids[start + n:start + n + k]\n",
                   "                return ids[start:start + k]\n")],
        "fails": ["test_lookup"],
        "message": "the matched tokens themselves",
        "messages": {"test_lookup": "the matched tokens themselves"},
    },
    # --- the bonus: adaptive k ----------------------------------------------------------------------
    {
        "name": "adaptive_no_confidence_stop",
        "kind": "bug",
        "description": "adaptive k drafts every planned token, also after one the draft is unsure of",
        "edits": [("            if confidence.item() < self.confidence_threshold:  # a host sync: whether to go on "
                   "depends on it\n                break\n", "")],
        "fails": ["test_adaptive"],
        "message": "stop drafting right after such a token",
        "messages": {"test_adaptive": "stop drafting right after such a token"},
    },
    {
        "name": "adaptive_counts_every_round",
        "kind": "bug",
        "description": "adaptive k also counts the rounds after a fully accepted one, which start partway into a run",
        "edits": [("            self.counted = n_accepted < drafted\n", "            self.counted = True\n")],
        "fails": ["test_adaptive"],
        "message": "so it is not counted",
        "messages": {"test_adaptive": "so it is not counted"},
    },
    {
        "name": "adaptive_ignores_draft_cost",
        "kind": "bug",
        "description": "adaptive k prices a round by its target forward alone, as if drafting were free",
        "edits": [("        if tokens / costs.round_seconds(j) > best:\n"
                   "            best_k, best = j, tokens / costs.round_seconds(j)\n",
                   "        if tokens / costs.verify[j] > best:\n"
                   "            best_k, best = j, tokens / costs.verify[j]\n")],
        "fails": ["test_adaptive"],
        "message": "k draft steps",
        "messages": {"test_adaptive": "k draft steps"},
    },
    # --- correct variants ---------------------------------------------------------------------------
    {
        "name": "variant_draft_with_generate",
        "kind": "variant",
        "description": "drafting with the draft model's own generate()",
        "edits": [("        ids, mask = input_ids, attention_mask\n"
                   "        for _ in range(num_speculative_tokens):\n"
                   "            logits = self.draft_model(input_ids=ids, attention_mask=mask, use_cache=False).logits"
                   "  # (1, n, V)\n" + DRAFT_ARGMAX +
                   "            ids = torch.cat([ids, next_token], dim=1)\n"
                   "            mask = torch.cat([mask, torch.ones_like(next_token)], dim=1)\n"
                   "        return ids[:, input_ids.shape[1]:]\n",
                   "        out = self.draft_model.generate(\n"
                   "            input_ids, attention_mask=attention_mask, do_sample=False,\n"
                   "            max_new_tokens=num_speculative_tokens,\n"
                   "            eos_token_id=None)  # greedy past EOS too: min_new_tokens would ban EOS instead\n"
                   "        return out[:, input_ids.shape[1]:]\n")],
        "fails": [],
    },
    {
        "name": "variant_crop_directly",
        "kind": "variant",
        "description": "cropping with DynamicCache.crop(-n) instead of the kit's crop_to",
        "edits": [("                crop_to(cache, length)\n",
                   "                cache.crop(length - cache.get_seq_length())\n")],
        "fails": [],
    },
    {
        "name": "variant_no_grad",
        "kind": "variant",
        "description": "torch.no_grad instead of inference_mode around the loop",
        "edits": [("    @torch.inference_mode()\n    def speculative_decode(",
                   "    @torch.no_grad()\n    def speculative_decode(")],
        "fails": [],
    },
    {
        "name": "variant_loop_structure",
        "kind": "variant",
        "description": "an empty draft made inline, and EOS found with a tensor search",
        "edits": [("            if k > 0:\n"
                   "                draft_tokens = self.generate_draft_tokens(input_ids, attention_mask, k)\n"
                   "            else:\n"
                   "                draft_tokens = input_ids.new_empty((1, 0))\n",
                   "            draft_tokens = (self.generate_draft_tokens(input_ids, attention_mask, k) if k\n"
                   "                            else torch.empty((1, 0), dtype=torch.long, device=self.device))\n"),
                  ("            emitted = truncate_at_eos(round_tokens[0].tolist(), eos_ids)\n",
                   "            eos = torch.tensor(sorted(eos_ids), device=self.device)\n"
                   "            is_eos = torch.isin(round_tokens[0], eos)\n"
                   "            stop = int(is_eos.int().argmax()) + 1 if bool(is_eos.any()) \\\n"
                   "                else round_tokens.shape[1]\n"
                   "            emitted = round_tokens[0, :stop].tolist()\n")],
        "fails": [],
    },
    {
        # Grading machines without a GPU run it in fp32 like the reference; on CUDA the checks still pass
        # because they build decoders on the CPU, and test_speedup times it against fp16 HF assisted.
        "name": "variant_fp16_draft",
        "kind": "variant",
        "description": "the draft loaded in fp16 whenever CUDA is the device, whatever dtype was asked",
        "edits": [("        return self.initialize_target_model(model_name)\n",
                   "        source, kwargs = model_source(model_name)\n"
                   "        tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)\n"
                   "        tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token\n"
                   "        dtype = torch.float16 if self.device.type == \"cuda\" else self.dtype\n"
                   "        model = AutoModelForCausalLM.from_pretrained(source, **kwargs, **dtype_kwargs(dtype))\n"
                   "        return model.to(self.device).eval(), tokenizer\n")],
        "fails": [],
    },
    {
        "name": "variant_uncached_only",
        "kind": "variant",
        "description": "a correct decoder without caches: the cached class only inherits",
        "edits": [("        cache, cached = self.cached_prefix(\"target\", input_ids)\n",
                   "        return SpeculativeDecoder.verify_tokens_vectorized(self, input_ids, draft_tokens, "
                   "attention_mask)\n        cache, cached = self.cached_prefix(\"target\", input_ids)\n"),
                  ("        cache, cached = self.cached_prefix(\"draft\", input_ids)\n",
                   "        return SpeculativeDecoder.generate_draft_tokens(self, input_ids, attention_mask, "
                   "num_speculative_tokens)\n        cache, cached = self.cached_prefix(\"draft\", input_ids)\n")],
        # adaptive k keeps Part 2's caches, so it loses test_adaptive with them
        "fails": ["test_cache_use", "test_speedup", "test_adaptive"],
        "message": "started from an empty cache",
    },
    {
        "name": "variant_sampler_accept_loop",
        "kind": "variant",
        "description": "speculative sampling's acceptance as a loop over the drafts, one uniform draw each, "
                       "p/q divided",
        "edits": [("    u = torch.rand(k, generator=generator, device=p.device)\n"
                   "    n_accepted = int((u * q_drafts < p_drafts).cumprod(dim=0).sum())  # u < p/q without dividing\n",
                   "    n_accepted = 0\n"
                   "    while n_accepted < k:\n"
                   "        u = torch.rand(1, generator=generator, device=p.device).item()\n"
                   "        if u >= (p_drafts[n_accepted] / q_drafts[n_accepted]).item():\n"
                   "            break\n"
                   "        n_accepted += 1\n")],
        "fails": [],
    },
    {
        "name": "variant_lookup_earliest_match",
        "kind": "variant",
        "description": "prompt lookup drafting from the earliest earlier occurrence of the n-gram, as HF does",
        "edits": [(LOOKUP_STARTS,
                   "        for start in range(len(ids) - n):  # the earliest occurrence first, as HF\n")],
        "fails": [],
    },
]
