// The prelude's source text, parsed ahead of every program.
#include "compiler/parser/prelude.h"

namespace kiln::parser {

std::string_view preludeSource() {
  return R"relay(#[version = "0.0.5"]
type List[A] { Cons(A, List[A]), Nil }
type Option[A] { Some(A), None }
type Tree[A] { Rose(A, List[Tree[A]]) }

def @id[A](%x: A) -> A { %x }

def @compose[A, B, C](%f: fn (B) -> C, %g: fn (A) -> B) -> fn (A) -> C {
  fn (%x: A) -> C { %f(%g(%x)) }
}

def @flip[A, B, C](%f: fn (A, B) -> C) -> fn (B, A) -> C {
  fn (%b: B, %a: A) -> C { %f(%a, %b) }
}

def @hd[A](%xs: List[A]) -> A {
  match? (%xs) { Cons(%x, _) => %x }
}

def @tl[A](%xs: List[A]) -> List[A] {
  match? (%xs) { Cons(_, %rest) => %rest }
}

def @nth[A](%xs: List[A], %n: int32) -> A {
  if (%n == 0) { @hd(%xs) } else { @nth(@tl(%xs), %n - 1) }
}

def @update[A](%xs: List[A], %n: int32, %v: A) -> List[A] {
  if (%n == 0) { Cons(%v, @tl(%xs)) } else { Cons(@hd(%xs), @update(@tl(%xs), %n - 1, %v)) }
}

def @length[A](%xs: List[A]) -> int32 {
  match (%xs) {
    Cons(_, %rest) => 1 + @length(%rest),
    Nil => 0,
  }
}

def @map[A, B](%f: fn (A) -> B, %xs: List[A]) -> List[B] {
  match (%xs) {
    Cons(%x, %rest) => Cons(%f(%x), @map(%f, %rest)),
    Nil => Nil,
  }
}

def @foldl[A, B](%f: fn (A, B) -> A, %acc: A, %xs: List[B]) -> A {
  match (%xs) {
    Cons(%x, %rest) => @foldl(%f, %f(%acc, %x), %rest),
    Nil => %acc,
  }
}

def @foldr[A, B](%f: fn (A, B) -> B, %acc: B, %xs: List[A]) -> B {
  match (%xs) {
    Cons(%x, %rest) => %f(%x, @foldr(%f, %acc, %rest)),
    Nil => %acc,
  }
}

def @foldr1[A](%f: fn (A, A) -> A, %xs: List[A]) -> A {
  match? (%xs) {
    Cons(%x, Nil) => %x,
    Cons(%x, %rest) => %f(%x, @foldr1(%f, %rest)),
  }
}

def @sum(%xs: List[int32]) -> int32 {
  @foldl(fn (%a: int32, %b: int32) -> int32 { %a + %b }, 0, %xs)
}

def @concat[A](%xs: List[A], %ys: List[A]) -> List[A] {
  @foldr(Cons, %ys, %xs)
}

def @filter[A](%f: fn (A) -> bool, %xs: List[A]) -> List[A] {
  match (%xs) {
    Cons(%x, %rest) => if (%f(%x)) { Cons(%x, @filter(%f, %rest)) } else { @filter(%f, %rest) },
    Nil => Nil,
  }
}

def @zip[A, B](%xs: List[A], %ys: List[B]) -> List[(A, B)] {
  match (%xs, %ys) {
    (Cons(%x, %xr), Cons(%y, %yr)) => Cons((%x, %y), @zip(%xr, %yr)),
    _ => Nil,
  }
}

def @rev[A](%xs: List[A]) -> List[A] {
  @foldl(@flip(Cons), Nil, %xs)
}

def @map_accuml[A, B, C](%f: fn (A, B) -> (A, C), %init: A, %xs: List[B]) -> (A, List[C]) {
  match (%xs) {
    Cons(%x, %rest) => {
      let %step = %f(%init, %x);
      let %tail = @map_accuml(%f, %step.0, %rest);
      (%tail.0, Cons(%step.1, %tail.1))
    },
    Nil => (%init, Nil),
  }
}

def @map_accumr[A, B, C](%f: fn (A, B) -> (A, C), %init: A, %xs: List[B]) -> (A, List[C]) {
  match (%xs) {
    Cons(%x, %rest) => {
      let %tail = @map_accumr(%f, %init, %rest);
      let %step = %f(%tail.0, %x);
      (%step.0, Cons(%step.1, %tail.1))
    },
    Nil => (%init, Nil),
  }
}

def @unfoldr[A, B](%f: fn (A) -> Option[(A, B)], %seed: A) -> List[B] {
  match (%f(%seed)) {
    Some(%next) => Cons(%next.1, @unfoldr(%f, %next.0)),
    None => Nil,
  }
}

def @unfoldl[A, B](%f: fn (A) -> Option[(A, B)], %seed: A) -> List[B] {
  @rev(@unfoldr(%f, %seed))
}

def @tmap[A, B](%f: fn (A) -> B, %t: Tree[A]) -> Tree[B] {
  match (%t) {
    Rose(%v, %children) => Rose(%f(%v), @map(fn (%c: Tree[A]) -> Tree[B] { @tmap(%f, %c) }, %children)),
  }
}

def @size[A](%t: Tree[A]) -> int32 {
  match (%t) {
    Rose(_, %children) => 1 + @sum(@map(@size, %children)),
  }
}

def @iterate[A](%f: fn (A) -> A, %n: int32) -> fn (A) -> A {
  if (%n == 0) { @id } else { @compose(%f, @iterate(%f, %n - 1)) }
}
)relay";
}

}  // namespace kiln::parser
