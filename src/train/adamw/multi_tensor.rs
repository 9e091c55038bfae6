//! The launch tables of the multi-tensor AdamW (`src/train/adamw.cu`): parameter tensors
//! grouped 64 to a launch, each split into blocks of 65,536 elements, mirrored from the C side.

use super::Update;

/// Tensors in one launch's table (`LAB_MT_TENSORS`).
pub const TENSORS: usize = 64;
/// Elements a block covers (`LAB_MT_CHUNK`).
pub const CHUNK: usize = 65_536;
/// Threads a block (`LAB_MT_THREADS`).
pub const THREADS: u32 = 256;

/// `LabMtTable`, field for field.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Table {
    pub p: [*mut f32; TENSORS],
    pub m: [*mut f32; TENSORS],
    pub v: [*mut f32; TENSORS],
    pub g: [*const f32; TENSORS],
    pub len: [i64; TENSORS],
    pub decay: [f32; TENSORS],
    pub first_block: [i32; TENSORS + 1],
    pub n: i32,
}

/// `LabAdamwScalars`: the update's scalars that every tensor shares.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Scalars {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub step_size: f32,
    pub bc2_sqrt: f32,
}

impl From<Update> for Scalars {
    fn from(u: Update) -> Scalars {
        Scalars {
            lr: u.lr,
            beta1: u.beta1,
            beta2: u.beta2,
            eps: u.eps,
            step_size: u.step_size,
            bc2_sqrt: u.bc2_sqrt,
        }
    }
}

/// One parameter tensor's addresses (parameter, moments, gradient), size and weight decay.
#[derive(Clone, Copy)]
pub struct Entry {
    pub p: *mut f32,
    pub m: *mut f32,
    pub v: *mut f32,
    pub g: *const f32,
    pub len: usize,
    pub decay: f32,
}

/// Blocks a tensor of `len` elements takes.
pub fn blocks(len: usize) -> usize {
    len.div_ceil(CHUNK)
}

/// The launches for `entries` in order (empty tensors left out), each with the index of its
/// first block among all the launches' blocks: where its partial sums go.
pub fn tables(entries: &[Entry]) -> Vec<(Table, usize)> {
    let mut out = Vec::new();
    let mut base = 0;
    let live: Vec<&Entry> = entries.iter().filter(|e| e.len > 0).collect();
    for group in live.chunks(TENSORS) {
        let mut t = Table {
            p: [std::ptr::null_mut(); TENSORS],
            m: [std::ptr::null_mut(); TENSORS],
            v: [std::ptr::null_mut(); TENSORS],
            g: [std::ptr::null(); TENSORS],
            len: [0; TENSORS],
            decay: [0.0; TENSORS],
            first_block: [0; TENSORS + 1],
            n: group.len() as i32,
        };
        let mut block = 0;
        for (k, e) in group.iter().enumerate() {
            (t.p[k], t.m[k], t.v[k], t.g[k]) = (e.p, e.m, e.v, e.g);
            t.len[k] = e.len as i64;
            t.decay[k] = e.decay;
            t.first_block[k] = block as i32;
            block += blocks(e.len);
        }
        t.first_block[group.len()] = block as i32;
        out.push((t, base));
        base += block;
    }
    out
}

/// Blocks of all the launches together: the size of the partial sums.
pub fn total_blocks(lens: impl IntoIterator<Item = usize>) -> usize {
    lens.into_iter().map(blocks).sum()
}
