//! The operations of a program's `unary` and `binary` instructions, by the names
//! `Program`'s Python methods take (stream-format.md §7 gives each formula).

use crate::Error;

macro_rules! named_ops {
    ($(#[$meta:meta])* $name:ident, $arg:literal { $($(#[$vmeta:meta])* $variant:ident => $text:literal,)* }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)*
        }

        impl $name {
            /// Every operation, in the order of the error message's list.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            /// The operation's name, as `Program`'s Python methods take it.
            pub fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }

            /// The operation named `name`.
            ///
            /// # Errors
            /// [`Error::UnknownName`] (argument `op`) for any other string.
            pub fn from_name(name: &str) -> Result<$name, Error> {
                $name::ALL
                    .iter()
                    .copied()
                    .find(|op| op.name() == name)
                    .ok_or_else(|| Error::UnknownName {
                        arg: $arg,
                        got: name.to_owned(),
                        allowed: $name::ALL.iter().map(|op| op.name()).collect(),
                    })
            }
        }
    };
}

named_ops!(
    /// A one-operand operation (stream-format.md §7 gives each formula).
    UnaryOp, "op" {
        /// `-x`.
        Neg => "neg",
        /// `|x|`.
        Abs => "abs",
        /// `1 / x`.
        Reciprocal => "reciprocal",
        /// IEEE square root.
        Sqrt => "sqrt",
        /// [`crate::math::rsqrt`].
        Rsqrt => "rsqrt",
        /// [`crate::math::exp`].
        Exp => "exp",
        /// [`crate::math::expm1`].
        Expm1 => "expm1",
        /// [`crate::math::log`].
        Log => "log",
        /// [`crate::math::log1p`].
        Log1p => "log1p",
        /// [`crate::math::sin`] (refused beyond [`crate::math::TRIG_MAX`]).
        Sin => "sin",
        /// [`crate::math::cos`] (refused beyond [`crate::math::TRIG_MAX`]).
        Cos => "cos",
        /// [`crate::math::tanh`].
        Tanh => "tanh",
        /// [`crate::math::sigmoid`].
        Sigmoid => "sigmoid",
        /// [`crate::math::softplus`]: `x` if `x > 20`, else `log(1 + exp(x))` (torch's beta = 1,
        /// threshold = 20).
        Softplus => "softplus",
        /// Round toward minus infinity.
        Floor => "floor",
        /// [`crate::math::erf`] (fdlibm's).
        Erf => "erf",
        /// [`crate::math::erfinv`]: `+-inf` at `+-1`, NaN beyond.
        Erfinv => "erfinv",
        /// [`super::round_half_even`] (torch's `round`).
        RoundHalfEven => "round_half_even",
    }
);

named_ops!(
    /// A two-operand operation (stream-format.md §7 gives each formula).
    BinaryOp, "op" {
        /// `a + b`.
        Add => "add",
        /// `a - b`.
        Sub => "sub",
        /// `a * b`.
        Mul => "mul",
        /// `a / b`.
        Div => "div",
        /// [`crate::math::pow`].
        Pow => "pow",
        /// The smaller; NaN if either is NaN; `-0 < +0`.
        Min => "min",
        /// The larger; NaN if either is NaN; `-0 < +0`.
        Max => "max",
        /// Python's (and torch's) floor division of floats.
        FloorDiv => "floordiv",
        /// Python's (and torch's `remainder`) modulo of floats: the sign of `b`.
        Mod => "mod",
        /// `1.0` if `a < b` else `0.0`.
        Lt => "lt",
        /// `1.0` if `a <= b` else `0.0`.
        Le => "le",
        /// `1.0` if `a > b` else `0.0`.
        Gt => "gt",
        /// `1.0` if `a >= b` else `0.0`.
        Ge => "ge",
        /// `1.0` if `a == b` else `0.0`.
        Eq => "eq",
        /// `1.0` if `a != b` else `0.0` (NaN != NaN).
        Ne => "ne",
    }
);
