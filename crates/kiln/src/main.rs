fn main() {
    println!("kiln");
}
