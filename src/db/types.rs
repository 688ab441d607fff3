//! Text-valued types as SQL `text`: statuses, kinds and ids travel as their names, checked by each
//! table's constraints on the way in and parsed back on the way out, so that a misspelled one cannot
//! compile and an unknown one read back is a decode error, not a silent string.
//!
//! `text_type!(T)` maps any `T` with `fn as_str(&self) -> &str` and `FromStr` (its error an
//! `std::error::Error`); features invoke it next to their own types.

use crate::domain::slice::SliceKind;
use crate::domain::team::TeamId;

/// Implements sqlx's `Type`, `Encode`, `Decode` and `PgHasArrayType` for a text-valued type.
#[macro_export]
macro_rules! text_type {
    ($t:ty) => {
        impl sqlx::Type<sqlx::Postgres> for $t {
            fn type_info() -> sqlx::postgres::PgTypeInfo {
                <String as sqlx::Type<sqlx::Postgres>>::type_info()
            }
            fn compatible(ty: &sqlx::postgres::PgTypeInfo) -> bool {
                <String as sqlx::Type<sqlx::Postgres>>::compatible(ty)
            }
        }

        impl sqlx::postgres::PgHasArrayType for $t {
            fn array_type_info() -> sqlx::postgres::PgTypeInfo {
                <String as sqlx::postgres::PgHasArrayType>::array_type_info()
            }
        }

        impl<'q> sqlx::Encode<'q, sqlx::Postgres> for $t {
            fn encode_by_ref(
                &self,
                buf: &mut sqlx::postgres::PgArgumentBuffer,
            ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
                <&str as sqlx::Encode<'q, sqlx::Postgres>>::encode_by_ref(&self.as_str(), buf)
            }
        }

        impl<'r> sqlx::Decode<'r, sqlx::Postgres> for $t {
            fn decode(
                value: sqlx::postgres::PgValueRef<'r>,
            ) -> Result<Self, sqlx::error::BoxDynError> {
                let s = <&str as sqlx::Decode<'r, sqlx::Postgres>>::decode(value)?;
                Ok(s.parse::<$t>()?)
            }
        }
    };
}

text_type!(SliceKind);
text_type!(TeamId);
