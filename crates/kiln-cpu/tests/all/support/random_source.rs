//! Seeded random weights with every tensor non-trivial (norm weights and biases included), so
//! that a forward pass that skips or misapplies one of them disagrees with the reference.

use kiln_model::{HostTensor, ModelConfig, Role, TensorId, WeightSource};

use super::rng::Rng;

pub struct RandomSource {
    config: ModelConfig,
    seed: u64,
    bf16: bool,
}

impl RandomSource {
    pub fn new(config: ModelConfig, seed: u64) -> RandomSource {
        config.validate("test model").expect("test config is valid");
        RandomSource {
            config,
            seed,
            bf16: false,
        }
    }

    /// The same weights truncated to bf16, as a bf16 checkpoint would give them.
    pub fn bf16(config: ModelConfig, seed: u64) -> RandomSource {
        RandomSource {
            bf16: true,
            ..RandomSource::new(config, seed)
        }
    }
}

impl WeightSource for RandomSource {
    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn has(&self, id: TensorId) -> bool {
        id.exists_in(&self.config)
    }

    fn load_f32(&self, id: TensorId) -> anyhow::Result<HostTensor> {
        anyhow::ensure!(self.has(id), "no tensor {id}");
        let shape = id.shape(&self.config);
        let n: usize = shape.iter().product();
        let layer = id.layer.map_or(0, |l| l as u64 + 1);
        let mut rng = Rng::new(self.seed ^ (layer << 32) ^ (id.role.index() << 8));
        let data = match id.role {
            r if r.is_norm() => (0..n).map(|_| 1.0 + rng.uniform(0.3)).collect(),
            Role::QBias | Role::KBias | Role::VBias => rng.vec(n, 0.5),
            Role::TokenEmbd => rng.vec(n, 1.0),
            // Weights of std ~ 1/sqrt(fan_in) * 1.5 keep activations near unit scale and
            // logits spread enough to tell tokens apart.
            _ => {
                let fan_in = *shape.last().unwrap() as f32;
                rng.vec(n, 1.5 * 3f32.sqrt() / fan_in.sqrt())
            }
        };
        let data = if self.bf16 {
            data.into_iter()
                .map(|v: f32| f32::from_bits(v.to_bits() & 0xFFFF_0000))
                .collect()
        } else {
            data
        };
        Ok(HostTensor { shape, data })
    }
}
