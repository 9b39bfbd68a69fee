use super::*;

fn scheduler(max_num_seqs: usize, budget: usize, chunk: usize, blocks: usize) -> Scheduler {
    let cfg = SchedulerConfig {
        max_num_seqs,
        max_batched_tokens: budget,
        prefill_chunk: chunk,
        prefill_alone: false,
        prefix_cache: false,
        host_blocks: 0,
        max_inputs: 0,
    };
    Scheduler::new(
        cfg,
        KvGeometry {
            block_size: 4,
            num_blocks: blocks,
        },
    )
}

/// Runs one step the way the engine does, appending `token` wherever logits were asked for.
fn step(s: &mut Scheduler, token: u32) -> Vec<ScheduledChunk> {
    let plan = s.schedule();
    s.complete(&plan);
    for c in &plan {
        if c.want_logits {
            s.push_token(c.seq, token);
        }
    }
    plan
}

fn chunk(seq: SeqId, start: usize, len: usize, want_logits: bool) -> ScheduledChunk {
    ScheduledChunk {
        seq,
        start,
        len,
        want_logits,
        draft: 0,
    }
}

#[test]
fn a_long_prompt_is_prefilled_in_chunks_then_decoded() {
    let mut s = scheduler(4, 100, 4, 16);
    s.add(Sequence::new(1, (0..10).collect()));
    assert_eq!(step(&mut s, 50), vec![chunk(1, 0, 4, false)]);
    assert_eq!(step(&mut s, 50), vec![chunk(1, 4, 4, false)]);
    assert_eq!(step(&mut s, 50), vec![chunk(1, 8, 2, true)]);
    assert_eq!(step(&mut s, 51), vec![chunk(1, 10, 1, true)]);
    assert_eq!(s.get(1).unwrap().generated(), &[50, 51]);
    assert_eq!(s.blocks().table(1).len(), 3);
}

/// `prefill_alone`: with nobody decoding a prompt takes the whole budget; once a sequence
/// decodes, prompts go back to `prefill_chunk` beside it.
#[test]
fn a_prompt_alone_takes_the_budget_and_gives_it_back_to_decodes() {
    let mut s = scheduler(4, 12, 4, 64);
    s.cfg.prefill_alone = true;
    s.add(Sequence::new(1, (0..20).collect()));
    assert_eq!(step(&mut s, 50), vec![chunk(1, 0, 12, false)]);
    assert_eq!(step(&mut s, 50), vec![chunk(1, 12, 8, true)]);
    // Sequence 1 decodes now: a new prompt's chunks are prefill_chunk long beside it.
    s.add(Sequence::new(2, (0..20).collect()));
    assert_eq!(
        step(&mut s, 51),
        vec![chunk(1, 20, 1, true), chunk(2, 0, 4, false)]
    );
    assert_eq!(
        step(&mut s, 52),
        vec![chunk(1, 21, 1, true), chunk(2, 4, 4, false)]
    );
    // Without the switch the lone prompt runs in prefill_chunk pieces.
    let mut plain = scheduler(4, 12, 4, 64);
    plain.add(Sequence::new(1, (0..20).collect()));
    assert_eq!(step(&mut plain, 50), vec![chunk(1, 0, 4, false)]);
}

/// Two prompts arriving together with nobody decoding share the budget in arrival order, the
/// first taking what it needs.
#[test]
fn prompts_alone_share_the_budget_in_order() {
    let mut s = scheduler(4, 12, 4, 64);
    s.cfg.prefill_alone = true;
    s.add(Sequence::new(1, (0..8).collect()));
    s.add(Sequence::new(2, (0..8).collect()));
    assert_eq!(
        step(&mut s, 50),
        vec![chunk(1, 0, 8, true), chunk(2, 0, 4, false)]
    );
}

#[test]
fn decodes_and_prefill_chunks_share_one_budget() {
    let mut s = scheduler(8, 10, 2048, 64);
    s.add(Sequence::new(1, vec![1, 2]));
    s.add(Sequence::new(2, vec![3, 4, 5]));
    assert_eq!(
        step(&mut s, 9),
        vec![chunk(1, 0, 2, true), chunk(2, 0, 3, true)]
    );
    s.add(Sequence::new(3, (0..100).collect()));
    let plan = step(&mut s, 9);
    assert_eq!(
        plan,
        vec![
            chunk(1, 2, 1, true),
            chunk(2, 3, 1, true),
            chunk(3, 0, 8, false)
        ]
    );
    assert_eq!(plan.iter().map(|c| c.len).sum::<usize>(), 10);
}

#[test]
fn an_older_prefill_leaves_budget_for_younger_decodes() {
    let mut s = scheduler(8, 8, 2048, 64);
    s.add(Sequence::new(1, (0..20).collect()));
    assert_eq!(step(&mut s, 9), vec![chunk(1, 0, 8, false)]);
    s.add(Sequence::new(2, vec![1]));
    s.add(Sequence::new(3, vec![2]));
    // The budget is spent by sequence 1's prefill, so 2 and 3 wait a step.
    assert_eq!(step(&mut s, 9), vec![chunk(1, 8, 8, false)]);
    assert_eq!(
        step(&mut s, 9),
        vec![
            chunk(1, 16, 4, true),
            chunk(2, 0, 1, true),
            chunk(3, 0, 1, true)
        ]
    );
    // Now running: sequence 1 keeps budget for 2 and 3.
    assert_eq!(
        step(&mut s, 9),
        vec![
            chunk(1, 20, 1, true),
            chunk(2, 1, 1, true),
            chunk(3, 1, 1, true)
        ]
    );
}

#[test]
fn admission_stops_at_max_num_seqs() {
    let mut s = scheduler(2, 100, 2048, 64);
    for id in 1..=3 {
        s.add(Sequence::new(id, vec![7; 3]));
    }
    let plan = step(&mut s, 9);
    assert_eq!(plan.iter().map(|c| c.seq).collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!((s.num_running(), s.num_waiting()), (2, 1));
    s.remove(1);
    let plan = step(&mut s, 9);
    assert_eq!(plan, vec![chunk(2, 3, 1, true), chunk(3, 0, 3, true)]);
}

#[test]
fn admission_waits_for_free_blocks() {
    let mut s = scheduler(8, 100, 2048, 3);
    s.add(Sequence::new(1, vec![1; 8]));
    s.add(Sequence::new(2, vec![1; 8]));
    let plan = step(&mut s, 9);
    assert_eq!(plan, vec![chunk(1, 0, 8, true)]);
    assert_eq!(s.num_waiting(), 1);
    assert!(s.blocks().table(2).is_empty());
}

#[test]
fn a_full_pool_preempts_the_newest_and_recomputes_it_later() {
    // 3 blocks of 4 tokens: sequence 1 takes two, sequence 2 the third.
    let mut s = scheduler(8, 100, 2048, 3);
    s.add(Sequence::new(1, vec![1; 8]));
    s.add(Sequence::new(2, vec![2; 3]));
    assert_eq!(
        step(&mut s, 9),
        vec![chunk(1, 0, 8, true), chunk(2, 0, 3, true)]
    );
    assert_eq!(s.blocks().num_free(), 0);
    // Sequence 1 needs a third block for position 8: sequence 2, the newest, is preempted.
    assert_eq!(step(&mut s, 9), vec![chunk(1, 8, 1, true)]);
    assert_eq!(s.preemptions(), 1);
    assert_eq!((s.num_running(), s.num_waiting()), (1, 1));
    let two = s.get(2).unwrap();
    assert_eq!(
        (two.num_computed, two.tokens.len()),
        (0, 4),
        "keeps its generated token"
    );
    assert!(s.blocks().table(2).is_empty());
    // When 1 finishes, 2 comes back and recomputes prompt + generated token in one chunk.
    s.remove(1);
    assert_eq!(step(&mut s, 9), vec![chunk(2, 0, 4, true)]);
    assert_eq!(s.get(2).unwrap().generated(), &[9, 9]);
}

#[test]
fn the_oldest_sequence_is_preempted_last() {
    let mut s = scheduler(8, 100, 2048, 4);
    for id in 1..=3 {
        s.add(Sequence::new(id, vec![1; 4]));
    }
    step(&mut s, 9);
    assert_eq!(s.blocks().num_free(), 1);
    // All three need a new block for position 4 and one is free: 1 takes it, 2 takes the
    // block of 3, the newest, which is preempted.
    assert_eq!(
        step(&mut s, 9),
        vec![chunk(1, 4, 1, true), chunk(2, 4, 1, true)]
    );
    assert_eq!(s.preemptions(), 1);
    assert!(s.is_running(1) && s.is_running(2) && !s.is_running(3));
    s.remove(1);
    let plan = step(&mut s, 9);
    assert_eq!(plan, vec![chunk(2, 5, 1, true), chunk(3, 0, 5, true)]);
}

#[test]
fn a_sequence_longer_than_the_pool_is_preempted_not_crashed() {
    let mut s = scheduler(8, 100, 2048, 2);
    s.add(Sequence::new(1, vec![1; 7]));
    assert_eq!(step(&mut s, 9), vec![chunk(1, 0, 7, true)]);
    assert_eq!(step(&mut s, 9), vec![chunk(1, 7, 1, true)]);
    // Position 8 needs a third block that does not exist. The engine refuses such lengths at
    // submit; the scheduler itself still neither crashes nor loses the sequence's tokens.
    assert!(step(&mut s, 9).is_empty());
    assert_eq!(s.preemptions(), 1);
    assert_eq!(s.get(1).unwrap().tokens.len(), 9);
    assert_eq!(s.blocks().num_free(), 2);
}

#[test]
fn removing_a_sequence_frees_its_blocks_wherever_it_is() {
    let mut s = scheduler(1, 100, 2048, 8);
    s.add(Sequence::new(1, vec![1; 5]));
    s.add(Sequence::new(2, vec![1; 5]));
    step(&mut s, 9);
    assert_eq!(s.blocks().num_used(), 2);
    assert!(s.remove(1).is_some());
    assert!(
        s.remove(2).is_some(),
        "waiting sequences can be removed too"
    );
    assert!(s.remove(2).is_none());
    assert_eq!(s.blocks().num_used(), 0);
    assert!(s.is_idle());
    assert!(s.schedule().is_empty());
}

#[test]
fn inputs_carry_the_tokens_positions_and_block_tables() {
    let mut s = scheduler(4, 100, 3, 8);
    s.add(Sequence::new(1, vec![10, 11, 12, 13, 14]));
    let plan = s.schedule();
    let inputs = s.inputs(&plan);
    assert_eq!(inputs.len(), 1);
    assert_eq!(inputs[0].tokens, &[10, 11, 12]);
    assert_eq!(inputs[0].start_pos, 0);
    assert_eq!(inputs[0].block_table.len(), 1);
    assert!(!inputs[0].want_logits);
    s.complete(&plan);
    let plan = s.schedule();
    let inputs = s.inputs(&plan);
    assert_eq!(
        (inputs[0].tokens, inputs[0].start_pos),
        (&[13u32, 14][..], 3)
    );
    assert_eq!(inputs[0].block_table.len(), 2);
    assert!(inputs[0].want_logits);
}

#[test]
fn running_sequences_never_outnumber_the_token_budget() {
    let mut s = scheduler(8, 3, 2048, 64);
    for id in 1..=5 {
        s.add(Sequence::new(id, vec![1]));
    }
    step(&mut s, 9);
    assert_eq!((s.num_running(), s.num_waiting()), (3, 2));
    // Each running sequence decodes every step.
    assert_eq!(step(&mut s, 9).len(), 3);
}

fn cached_scheduler(budget: usize, chunk: usize, blocks: usize) -> Scheduler {
    let cfg = SchedulerConfig {
        max_num_seqs: 8,
        max_batched_tokens: budget,
        prefill_chunk: chunk,
        prefill_alone: false,
        prefix_cache: true,
        host_blocks: 0,
        max_inputs: 0,
    };
    Scheduler::new(
        cfg,
        KvGeometry {
            block_size: 4,
            num_blocks: blocks,
        },
    )
}

/// Runs steps until `id` has sampled `n` tokens, then takes it out; returns every chunk of it.
fn run_to(s: &mut Scheduler, id: SeqId, n: usize) -> Vec<ScheduledChunk> {
    let mut chunks = Vec::new();
    while s.get(id).is_some_and(|q| q.generated().len() < n) {
        chunks.extend(step(s, 7).into_iter().filter(|c| c.seq == id));
    }
    s.remove(id);
    chunks
}

#[test]
fn no_prefill_chunk_is_a_single_token_or_leaves_one() {
    // Prompt 9 with chunks of 4: 4 + 5 would leave 1 after the first 4 + 4, so 4 + 3 + 2.
    let mut s = scheduler(4, 100, 4, 16);
    s.add(Sequence::new(1, (0..9).collect()));
    let lens: Vec<usize> = run_to(&mut s, 1, 2).iter().map(|c| c.len).collect();
    assert_eq!(lens, [4, 3, 2, 1]);
    // A budget that would cut a prompt to one token leaves it for the next step.
    let mut s = scheduler(4, 5, 2048, 16);
    s.add(Sequence::new(1, vec![1, 2, 3, 4]));
    s.add(Sequence::new(2, vec![5, 6]));
    let plan = step(&mut s, 9);
    assert_eq!(plan, vec![chunk(1, 0, 4, true)]);
    assert_eq!(
        step(&mut s, 9),
        vec![chunk(1, 4, 1, true), chunk(2, 0, 2, true)]
    );
    // A one-token prompt is a decode row, as before.
    let mut s = scheduler(4, 100, 4, 16);
    s.add(Sequence::new(1, vec![3]));
    assert_eq!(step(&mut s, 9), vec![chunk(1, 0, 1, true)]);
}

#[test]
fn a_repeated_prompt_starts_after_its_cached_blocks() {
    let mut s = cached_scheduler(100, 2048, 16);
    let prompt: Vec<u32> = (0..14).collect();
    s.add(Sequence::new(1, prompt.clone()));
    run_to(&mut s, 1, 3);
    // Blocks 0..3 (12 tokens) were prefilled; the generated tokens were decoded, not cached.
    assert_eq!(s.blocks().num_cached(), 3);
    s.add(Sequence::new(2, prompt.clone()));
    let first = step(&mut s, 7);
    assert_eq!(first, vec![chunk(2, 12, 2, true)]);
    assert_eq!(s.get(2).unwrap().cached_tokens, 12);
    // All of a prompt cached: the last block is recomputed so that two tokens run.
    s.remove(2);
    let whole: Vec<u32> = (0..12).collect();
    s.add(Sequence::new(3, whole));
    assert_eq!(step(&mut s, 7), vec![chunk(3, 8, 4, true)]);
    assert_eq!(s.get(3).unwrap().cached_tokens, 8);
    // One token more than the cached blocks: two blocks hit, six tokens run.
    s.remove(3);
    let mut longer = prompt.clone();
    longer.truncate(13);
    s.add(Sequence::new(4, longer));
    assert_eq!(step(&mut s, 7), vec![chunk(4, 8, 5, true)]);
}

#[test]
fn a_cached_prefix_is_given_back_when_the_rest_does_not_fit() {
    let mut s = cached_scheduler(100, 2048, 4);
    let prompt: Vec<u32> = (0..9).collect();
    s.add(Sequence::new(1, prompt.clone()));
    run_to(&mut s, 1, 1);
    // Another sequence holds 3 of the 4 blocks (the tail block of the first prompt was evicted
    // for it, the head stays cached); the repeat (1 cached + 2 new) cannot start.
    s.add(Sequence::new(2, (50..61).collect()));
    step(&mut s, 7);
    s.add(Sequence::new(3, prompt));
    let plan = step(&mut s, 7);
    assert!(plan.iter().all(|c| c.seq != 3), "{plan:?}");
    assert_eq!(s.get(3).unwrap().num_computed, 0);
    assert!(s.blocks().table(3).is_empty());
    s.remove(2);
    assert_eq!(step(&mut s, 7), vec![chunk(3, 4, 5, true)]);
}

#[test]
fn blocks_become_cached_as_the_chunk_that_completes_them_runs() {
    // Chunks of 18 over blocks of 4: a chunk ends inside a block, and only the blocks it
    // completed are cached, in the same step, with no extra pass.
    let mut s = cached_scheduler(100, 18, 32);
    let p: Vec<u32> = (0..40).collect();
    s.add(Sequence::new(1, p.clone()));
    assert_eq!(step(&mut s, 7), vec![chunk(1, 0, 18, false)]);
    assert_eq!(s.blocks().num_cached(), 4);
    // A sequence arriving now finds what is computed so far, and no more.
    s.add(Sequence::new(2, p.clone()));
    let plan = step(&mut s, 7);
    assert_eq!(plan, vec![chunk(1, 18, 18, false), chunk(2, 16, 18, false)]);
    assert_eq!(s.get(2).unwrap().cached_tokens, 16);
    // Both computed blocks 4..9 in that step; the second copy is not cached twice.
    assert_eq!(s.blocks().num_cached(), 9);
    step(&mut s, 7);
    assert_eq!(s.blocks().num_cached(), 10);
    // Decode rows are never cached: generated tokens fill block 10, which stays uncached.
    for _ in 0..4 {
        step(&mut s, 7);
    }
    assert_eq!(s.get(1).unwrap().tokens.len(), 45);
    assert_eq!(s.blocks().num_cached(), 10);
}
