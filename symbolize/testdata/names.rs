// names.rs: Rust names for comparing rewind's demangling with binutils
// (nm -C, addr2line -C): a module, a trait impl, a generic function, a
// closure and an #[inline(always)] helper inlined into its caller.
mod shapes {
    pub struct Circle {
        pub r: f64,
    }
    pub trait Area {
        fn area(&self) -> f64;
    }
    impl Area for Circle {
        #[inline(never)]
        fn area(&self) -> f64 {
            std::hint::black_box(self.r * self.r * 3.14)
        }
    }
    #[inline(always)]
    fn scaled<T: Area>(x: &T, k: f64) -> f64 {
        x.area() * k
    }
    #[inline(never)]
    pub fn total<T: Area>(xs: &[T]) -> f64 {
        xs.iter().map(|x| scaled(x, 2.0) + x.area()).sum()
    }
}

#[inline(never)]
fn run(n: usize) -> f64 {
    let v: Vec<shapes::Circle> = (0..n).map(|i| shapes::Circle { r: i as f64 }).collect();
    shapes::total(&v)
}

fn main() {
    println!("{}", run(std::env::args().count() + 3));
}
