//! What gets ranked: plain documents made of typed text fields.

/// A document's position in the slice passed to [`crate::Bm25Index::build`].
pub type DocId = u32;

/// The kinds of text a document carries. Each field has its own weight and its own length
/// normalisation in BM25F, so a hit in a short name counts more than one in a long
/// description.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Field {
    Name,
    Server,
    Description,
    ParamName,
    ParamDescription,
    ServerDescription,
}

impl Field {
    /// Every field, in declaration order.
    pub const ALL: [Field; 6] = [
        Field::Name,
        Field::Server,
        Field::Description,
        Field::ParamName,
        Field::ParamDescription,
        Field::ServerDescription,
    ];

    /// A stable snake_case name, for config keys and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Field::Name => "name",
            Field::Server => "server",
            Field::Description => "description",
            Field::ParamName => "param_name",
            Field::ParamDescription => "param_description",
            Field::ServerDescription => "server_description",
        }
    }

    /// Dense index into per-field arrays; the position in [`Field::ALL`].
    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// One rankable document, e.g. a tool.
#[derive(Clone, Debug, Default)]
pub struct Document {
    /// Stable identifier used only to break score ties (ascending); e.g. the qualified tool name.
    pub key: String,
    /// Text per field. A field may repeat (one `ParamName` entry per parameter); repeated
    /// entries count as one field whose text is their concatenation.
    pub fields: Vec<(Field, String)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_index_matches_position_in_all() {
        for (at, field) in Field::ALL.into_iter().enumerate() {
            assert_eq!(field.index(), at, "{field:?}");
        }
    }
}
