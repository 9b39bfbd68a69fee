pub mod assistant_fixture;
pub mod fixtures;
